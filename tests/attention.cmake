burst_test(test_flash_attn SOURCES test_flash_attn.c LIBS burst_attention LABELS attention)
