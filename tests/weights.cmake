burst_test(test_weights SOURCES test_weights.c LIBS burst_weights LABELS model)

add_executable(weights_dump weights_dump.c)
target_link_libraries(weights_dump PRIVATE burst_weights)
burst_py_test(test_weights_random test_weights_random.py ARGS $<TARGET_FILE:weights_dump>)
