burst_test(test_common SOURCES test_common.c LIBS burst_common)
