// Where the H200 places thread block clusters of 2-16 CTAs (decode_gather_merge/README.md, h200-2). No flashbuild code:
// a kernel that records each CTA's SM (%smid) and cluster, spinning ~10 ms so that a launch's CTAs are resident at
// once. For dynamic shared memory of 100 KB (two CTAs an SM, as the decode tile) and 120 KB (one), it prints
// cudaOccupancyMaxActiveClusters for each cluster size, and for sizes 8 and 16 launches 128 CTAs (the batch-1 decode's
// grid: 8 K/V heads x 16 splits) and prints how many SMs they landed on, the most on one SM, and each cluster's SMs.
//   nvcc -arch=sm_90a -o probe cluster_probe.cu && ./probe
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>
__global__ void k(int* out) {
  extern __shared__ char s[];
  unsigned smid; asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  unsigned rank; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  unsigned cid; asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
  if (threadIdx.x == 0) { out[blockIdx.x * 3] = smid; out[blockIdx.x * 3 + 1] = cid; out[blockIdx.x*3+2]=rank; s[0]=1;}
  long long t0 = clock64(); while (clock64() - t0 < 20000000) {}
}
int main() {
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  int* d; cudaMalloc(&d, 4096 * 4);
  for (int smem : {100 * 1024, 120 * 1024}) {
    for (int cs : {2, 4, 8, 12, 14, 16}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(cs * (128 / cs)); cfg.blockDim = dim3(384); cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension; a[0].val.clusterDim.x = cs;
      a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1; cfg.attrs = a; cfg.numAttrs = 1;
      int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
      printf("smem %dK cluster %d: max active clusters %d (%s)\n", smem / 1024, cs, n, cudaGetErrorString(e));
      if (cs == 16 || cs == 8) {
        cfg.gridDim = dim3(128);
        e = cudaLaunchKernelEx(&cfg, k, d); cudaError_t e2 = cudaDeviceSynchronize();
        std::vector<int> h(128 * 3); cudaMemcpy(h.data(), d, 128 * 3 * 4, cudaMemcpyDeviceToHost);
        std::vector<int> per(200, 0); for (int i = 0; i < 128; ++i) per[h[i * 3]]++;
        int used = 0, mx = 0; for (int c : per) { used += c > 0; mx = std::max(mx, c); }
        printf("  launch 128 CTAs: %s/%s, SMs used %d, max per SM %d\n", cudaGetErrorString(e),
               cudaGetErrorString(e2), used, mx);
        for (int c = 0; c < 128 / cs; ++c) {
          printf("   cluster %d:", c);
          for (int i = 0; i < 128; ++i) if (h[i * 3 + 1] == c && i / cs == c) printf(" %d", h[i * 3]);
          printf("\n");
        }
      }
    }
  }
}
