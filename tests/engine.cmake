burst_test(test_ring SOURCES test_ring.c LIBS burst_attention burst_comm)
