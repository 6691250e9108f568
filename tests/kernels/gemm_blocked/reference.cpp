// The reference the candidates are checked against: the same product summed in double, one
// element at a time. A C++ function (not extern "C"): ktune's shim calls it by its declaration.
void gemm_reference(const float* A, const float* B, float* C, int M, int N, int K) {
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int k = 0; k < K; ++k) sum += static_cast<double>(A[i * K + k]) * B[k * N + j];
      C[i * N + j] = static_cast<float>(sum);
    }
  }
}
