; A double-buffered DMA -> vector -> DMA pipeline over four 32x256 fp16 blocks.
; dma0 loads block i into buffer i % 2 and signals sem 1; vu0 waits for it, scales the block in
; place and signals sem 2; dma1 stores the block and signals sem 3, which frees the buffer
; for the load two blocks later (dma0 waits on sem 3 before reusing a buffer). The load of
; block i+1 overlaps the scaling of block i.
.spad 33554432
.data
    IN  addr=0x0     size=65536 shape=128x256 dtype=fp16 kind=activation
    OUT addr=0x10000 size=65536 shape=128x256 dtype=fp16 kind=activation
.stream dma0
    DMA_LOAD spad=0x0,    hbm=IN+0x0,    rows=32, cols=256, stride=512, dtype=fp16
    SIGNAL sem=1, count=1
    DMA_LOAD spad=0x4000, hbm=IN+0x4000, rows=32, cols=256, stride=512, dtype=fp16
    SIGNAL sem=1, count=1
    WAIT sem=3, count=1                 ; buffer 0 stored
    DMA_LOAD spad=0x0,    hbm=IN+0x8000, rows=32, cols=256, stride=512, dtype=fp16
    SIGNAL sem=1, count=1
    WAIT sem=3, count=1                 ; buffer 1 stored
    DMA_LOAD spad=0x4000, hbm=IN+0xC000, rows=32, cols=256, stride=512, dtype=fp16
    SIGNAL sem=1, count=1
.stream vu0
    WAIT sem=1, count=1
    VU_SCALE dst=0x0,    src=0x0,    rows=32, cols=256, dtype=fp16, imm=0.5
    SIGNAL sem=2, count=1
    WAIT sem=1, count=1
    VU_SCALE dst=0x4000, src=0x4000, rows=32, cols=256, dtype=fp16, imm=0.5
    SIGNAL sem=2, count=1
    WAIT sem=1, count=1
    VU_SCALE dst=0x0,    src=0x0,    rows=32, cols=256, dtype=fp16, imm=0.5
    SIGNAL sem=2, count=1
    WAIT sem=1, count=1
    VU_SCALE dst=0x4000, src=0x4000, rows=32, cols=256, dtype=fp16, imm=0.5
    SIGNAL sem=2, count=1
.stream dma1
    WAIT sem=2, count=1
    DMA_STORE spad=0x0,    hbm=OUT+0x0,    rows=32, cols=256, stride=512, dtype=fp16
    SIGNAL sem=3, count=1
    WAIT sem=2, count=1
    DMA_STORE spad=0x4000, hbm=OUT+0x4000, rows=32, cols=256, stride=512, dtype=fp16
    SIGNAL sem=3, count=1
    WAIT sem=2, count=1
    DMA_STORE spad=0x0,    hbm=OUT+0x8000, rows=32, cols=256, stride=512, dtype=fp16
    WAIT sem=2, count=1
    DMA_STORE spad=0x4000, hbm=OUT+0xC000, rows=32, cols=256, stride=512, dtype=fp16
