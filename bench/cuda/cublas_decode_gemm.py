# bench/cuda/cublas_decode_gemm.py: cuBLAS (torch.nn.functional.linear, bf16) at 1, 64 and 128 rows for
# Llama-3-8B's projections, the rate a library reaches with no fixed k-chunk order (pagoda's decode
# GEMMs keep one for batch invariance). Four weight copies rotated (> L2), CUDA events. Run on the
# device beside `pagoda_cuda_bench --gemm-only --quick`: python3 bench/cuda/cublas_decode_gemm.py
import torch
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
dev = torch.device("cuda")
src = torch.empty(1 << 30, dtype=torch.uint8, device=dev); dst = torch.empty_like(src)
for _ in range(3): dst.copy_(src)
torch.cuda.synchronize(); e0 = torch.cuda.Event(True); e1 = torch.cuda.Event(True)
e0.record()
for _ in range(10): dst.copy_(src)
e1.record(); torch.cuda.synchronize(); copy = 2 * (1 << 30) * 10 / (e0.elapsed_time(e1) / 1e3) / 1e9
print(f"copy {copy:.0f} GB/s")
del src, dst
for name, n, k in [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)]:
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(4)]
    for m in (1, 64, 128):
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        for i in range(8): torch.nn.functional.linear(x, ws[i % 4])
        torch.cuda.synchronize(); reps = 200
        e0.record()
        for i in range(reps): torch.nn.functional.linear(x, ws[i % 4])
        e1.record(); torch.cuda.synchronize()
        t = e0.elapsed_time(e1) / 1e3 / reps
        gbs = (2 * n * k + 2 * m * (n + k)) / t / 1e9
        print(f"cublas {name:8s} m={m:<4d} {t*1e6:7.1f} us {gbs:7.0f} GB/s ({100*gbs/copy:4.1f}% of copy)")
