burst_test(test_flash_attn SOURCES test_flash_attn.c LIBS burst_attention LABELS attention)
if(TARGET burst_attention_cuda)
  burst_test(test_flash_cuda SOURCES test_flash_cuda.c LIBS burst_attention_cuda LABELS attention gpu)
endif()
