// The CUDA backend (model/backend_cuda.cu): the backend interface of model/backend.h on one GPU.
//
// Activations are float32 or bf16 (as each op's dtype says) in device memory (cudaMalloc,
// zeroed like the CPU backend's calloc; never managed memory). Weights are copied to the device
// once, at backend_weight time:
//   - bf16 mode (backend "cuda", act dtype bf16): stored as bf16 whatever their file dtype
//     (F32/F16 are rounded to nearest even); matmul rounds float32 activation rows to bf16 (bf16
//     ones go as they are) and runs a cuBLAS bf16 GEMM with fp32 accumulation and a bf16 or fp32
//     output, or adds to an fp32 one; attention rounds Q (and fp32 K/V; a bf16 KV
//     cache is read in place) to bf16 and runs cuDNN's
//     fused attention (attention/flash_cudnn.h) for blocks of 1024 query rows or more when the
//     build has cuDNN and cuDNN takes the shape, else the tensor-core flash kernel
//     (attention/flash_cuda.h) for head_dim 64/128, else a plain fp32 kernel (head_dim <= 256).
//     The environment variable BURST_FLASH=ours, read at backend creation, keeps cuDNN out.
//   - Batched decode (either mode; BURST_BATCHED_DECODE=0, read at creation, turns it off):
//     backend_attention_batch sends its split-KV calls to decode_cuda_batch together,
//     backend_convert_batch rounds all its jobs in one launch, and backend_copy runs a batch in
//     one launch; off, all go call by call. (backend_merge runs a batch in one launch always.)
//     On an H200, 7B steps of 8 / 32 / 64 sequences took 7.7 / 11.8 / 17.1 ms with it against
//     13.2 / 36.0 / 66.0 without (bench_decode, 1K keys).
//   - Weight groups (backend_weight_group: Q/K/V and gate/up in model/llama.c) go into one
//     allocation each; backend_matmul_group runs neighbours of one shape there as one
//     strided-batched cuBLAS GEMM (BURST_GROUPED_GEMM=0, read at creation, runs its GEMMs one by
//     one instead). backend_matmul_add of up to 8 rows on a weight of 2048 columns or more, a
//     multiple of 32 (decode's output projections), runs as 4 GEMMs of a quarter of the columns
//     each, in one batched call, and a sum (split-K; BURST_SPLIT_K=0, read at creation: one GEMM).
//   - BURST_CUDA_GRAPHS=1 (read at creation): backend_graph_begin / _end run decode steps as CUDA
//     graphs, recorded once and replayed (model/backend_cuda.cu); off by default, since with
//     batched decode an H200 gained ~2% at 1-8 sequences and nothing at 32-64.
//   - BURST_PROFILE=1 (read at creation): the GPU time of each op, printed when it is freed.
//   - fp32 mode (backend "cuda-fp32", act dtype f32), for exactness tests: weights stay float32
//     (F16/BF16 widen exactly; so do bf16 activations), GEMMs are fp32 with CUBLAS_COMPUTE_32F and no TF32, attention always runs the
//     plain fp32 kernel (on fp32 or bf16 K/V). It matches the CPU backend to float32 rounding.
// Every op is asynchronous on the instance's one CUDA stream; to_host synchronizes it. The stream
// is non-blocking (it does not wait for the legacy default stream): a caller that writes backend
// buffers with its own CUDA calls must finish those writes before the next op. A failed
// CUDA/cuBLAS call aborts through the abort hook (CUDA_CHECK / CUBLAS_CHECK).
// Ownership: the backend owns its stream, cuBLAS handle, scratch and the device copies of the
// weights (freed by backend_free); callers own what backend_alloc gave them. Thread safety: one
// thread uses an instance at a time; separate instances (ranks) may run on separate threads.
#pragma once
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// A backend on CUDA device `device` modulo the number of GPUs (several ranks may share one GPU as
// virtual ranks); fp32 != 0 selects fp32 mode. Fails with BURST_ERR_DEVICE ("no CUDA device ...")
// when there is none.
burst_status backend_cuda_new(int device, int fp32, burst_backend **out, burst_error *err);

#ifdef __cplusplus
}
#endif
