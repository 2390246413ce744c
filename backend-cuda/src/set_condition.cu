// xthunk set-condition kernels (conditional graph nodes)
extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

extern "C" __global__ void xthunk_set_condition_pred(unsigned long long handle,
                                                     const unsigned char* pred) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    cudaGraphSetConditional(handle, pred[0] != 0 ? 1u : 0u);
}

extern "C" __global__ void xthunk_set_condition_branch(unsigned long long handle,
                                                       const int* index, int branch, int last) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int i = index[0];
    int selected = (i < 0 || i > last) ? last : i;
    cudaGraphSetConditional(handle, selected == branch ? 1u : 0u);
}

extern "C" __global__ void xthunk_set_condition_branch_pred(unsigned long long handle,
                                                            const unsigned char* pred,
                                                            int branch) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int selected = pred[0] != 0 ? 0 : 1;
    cudaGraphSetConditional(handle, selected == branch ? 1u : 0u);
}

extern "C" __global__ void xthunk_set_condition_trips(unsigned long long handle,
                                                      unsigned long long* counter,
                                                      unsigned long long n) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long c = counter[0];
    cudaGraphSetConditional(handle, c < n ? 1u : 0u);
    if (c != ~0ull) counter[0] = c + 1;
}
