; One PIM GEMV over a row group of channel 0 (run on a system with PIM: neupims).
; The query vector (512 fp16 = one 1 KB row) is loaded into the scratchpad, written into the
; channel's global buffer (GWRITE), then every bank of the channel opens row 0 in its PIM row
; buffer (G_ACT), multiplies it with the global buffer (PIM_GEMV: 32 COMP steps of 16
; elements + READRES, one fp32 result per bank into the scratchpad) and closes it.
; PIM_HEADER first announces the GEMV so the controller can fit it before a refresh.
.spad 33554432
.data
    Q  addr=0x0 size=1024 shape=512 dtype=fp16 kind=activation
    KV addr=0x100000 size=1048576 shape=524288 dtype=fp16 kind=kv
.stream dma0
    DMA_LOAD spad=0x0, hbm=Q, rows=1, cols=512, stride=1024, dtype=fp16
    SIGNAL sem=1, count=1
.stream pim0
    WAIT sem=1, count=1
    GWRITE channel=0, src=0x0, len=512, dtype=fp16
    PIM_HEADER channel=0, n_gemvs=1
    G_ACT channel=0, row=0, bg_mask=0               ; bg_mask 0 = every bank group
    PIM_GEMV channel=0, col=0, n_comps=32, dst=0x1000, dtype=fp16, out_dtype=fp32
    PIM_PRECHARGE channel=0, bg_mask=0
