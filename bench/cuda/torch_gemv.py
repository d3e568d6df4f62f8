"""PyTorch's fp16 / bf16 decode GEMV (and 512-token prefill matmul) on the device at the shapes of bench/cuda/cuda_linear_bench.cc:
the baseline beside sinkq's packed GEMV (scripts/device_check.sh). One token through an [N, K]
weight (torch.nn.functional.linear), the weight bytes over the median time per launch of 30 timings
of 20 launches (CUDA events), rotating over enough weight copies to exceed 4x the L2 cache."""
import torch

SHAPES = [("1.5B q/o", 1536, 1536), ("1.5B gate/up", 8960, 1536), ("1.5B down", 1536, 8960),
          ("1B gate/up", 5632, 2048), ("1B down", 2048, 5632), ("7B q", 4096, 4096),
          ("7B gate/up", 11008, 4096), ("7B down", 4096, 11008), ("1.5B head", 151936, 1536)]


def median_us(fn, reps=30, inner=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(5):
        fn(i)
    times, n = [], 0
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn(n)
            n += 1
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)
    times.sort()
    return times[len(times) // 2]


def main():
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"device: {props.name}; torch {torch.__version__}")
    print(f"{'shape':14s} {'N':>6s} {'K':>6s} {'dtype':8s} {'MB':>8s} {'us':>9s} {'GB/s':>8s}")
    for name, n, k in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            x = torch.randn(1, k, device=dev, dtype=dtype)
            bytes_ = n * k * 2
            copies = [torch.randn(n, k, device=dev, dtype=dtype) for _ in range(max(2, -(-4 * l2 // bytes_)))]
            us = median_us(lambda i: torch.nn.functional.linear(x, copies[i % len(copies)]))
            print(f"{name:14s} {n:6d} {k:6d} {str(dtype)[6:]:8s} {bytes_ / 1e6:8.2f} {us:9.2f} {bytes_ / us / 1e3:8.0f}")
            del copies
    # Prefill: torch.matmul of 512 tokens at the shapes of the bench's prefill rows (cuBLAS fp16 / bf16).
    print(f"\n{'prefill':14s} {'N':>6s} {'K':>6s} {'T':>5s} {'dtype':8s} {'us':>9s} {'TFLOPS':>8s}")
    for name, n, k in (SHAPES[5], SHAPES[6], SHAPES[1]):
        for dtype in (torch.float16, torch.bfloat16):
            x = torch.randn(512, k, device=dev, dtype=dtype)
            w = torch.randn(n, k, device=dev, dtype=dtype)
            us = median_us(lambda i: torch.nn.functional.linear(x, w), reps=10, inner=3)
            print(f"{name:14s} {n:6d} {k:6d} {512:5d} {str(dtype)[6:]:8s} {us:9.1f} {2 * 512 * n * k / us / 1e6:8.1f}")


if __name__ == "__main__":
    main()
