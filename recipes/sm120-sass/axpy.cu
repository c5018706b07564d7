// A small CUDA kernel for the sm120-sass recipe: y = a*x + y, compiled to SM120 machine code.
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
