burst_test(test_ring SOURCES test_ring.c LIBS burst_attention burst_comm)
burst_py_test(test_ranks test_ranks.py LABELS model)
