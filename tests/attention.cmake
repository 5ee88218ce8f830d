burst_test(test_flash_attn SOURCES test_flash_attn.c LIBS burst_attention LABELS attention)
# Again without AMX, so that the float32 loops stay tested on CPUs that have it.
add_test(NAME test_flash_attn_no_amx COMMAND test_flash_attn)
set_tests_properties(test_flash_attn_no_amx PROPERTIES LABELS attention ENVIRONMENT BURST_AMX=0)
if(TARGET burst_attention_cuda)
  burst_test(test_flash_cuda SOURCES test_flash_cuda.c LIBS burst_attention_cuda LABELS attention gpu)
endif()
