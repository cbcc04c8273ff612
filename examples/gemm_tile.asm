; One weight-stationary GEMM tile: out[64, 128] = x[64, 128] @ W[128, 128] (fp16 in, fp32 out).
; dma0 loads the weight tile and the input rows, sa0 preloads the weights (H cycles) and
; streams the 64 rows (H + W - 2 + max(64, 4) cycles), dma1 stores the fp32 result.
; Semaphore 1: inputs in the scratchpad; semaphore 2: result ready.
.spad 33554432
.data
    W   addr=0x0     size=32768 shape=128x128 dtype=fp16 kind=weight
    X   addr=0x8000  size=16384 shape=64x128  dtype=fp16 kind=activation
    OUT addr=0x10000 size=32768 shape=64x128  dtype=fp32 kind=activation
.stream dma0
    DMA_LOAD spad=0x0, hbm=W, rows=128, cols=128, stride=256, dtype=fp16     ; W -> spad[0]
    DMA_LOAD spad=0x8000, hbm=X, rows=64, cols=128, stride=256, dtype=fp16   ; x -> spad[32K]
    SIGNAL sem=1, count=1          ; fires when both loads have completed
.stream sa0
    WAIT sem=1, count=1
    SA_LOADW array=0, w=0x0, k=128, n=128, dtype=fp16
    SA_MATMUL array=0, src=0x8000, dst=0x10000, m=64, n=128, k=128, acc=0, dtype=fp16, out_dtype=fp32
    SIGNAL sem=2, count=1
.stream dma1
    WAIT sem=2, count=1
    DMA_STORE spad=0x10000, hbm=OUT, rows=64, cols=128, stride=512, dtype=fp32
