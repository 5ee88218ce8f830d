burst_test(test_weights SOURCES test_weights.c LIBS burst_weights LABELS model)
