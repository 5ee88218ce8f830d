burst_test(test_common SOURCES test_common.c LIBS burst_common)
burst_test(test_host_memory SOURCES test_host_memory.c LIBS burst_common)
