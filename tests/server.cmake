burst_py_test(test_server_api test_server_api.py LABELS model)
burst_py_test(test_server_load test_server_load.py LABELS model)
burst_py_test(test_server_cancel test_server_cancel.py LABELS model)
burst_py_test(test_openai_client test_openai_client.py LABELS model)
