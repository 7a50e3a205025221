// Emulation stand-in for <cuda_runtime_api.h> (stubs/README.md): the stream type the launcher declarations name.
#pragma once
struct CUstream_st;
using cudaStream_t = CUstream_st*;
