#pragma once
// TG_HD marks small helpers that both host code and CUDA kernels call (plain headers shared by a
// kernel .cu file and its host dispatcher / host tests).
#ifdef __CUDACC__
#define TG_HD __host__ __device__
#else
#define TG_HD
#endif
