// isa_fields.vh -- GENERATED from isa/spec.py by archsim.cosim.generate_isa_fields_vh().
// Do not edit: regenerate with `archsim cosim --write-isa-fields`; a test checks that this
// file equals the generator's output for the current ISA table.
// Included inside module isa_decoder.
localparam integer ISA_WORD_BITS   = 128;
localparam integer ISA_OPCODE_BITS = 8;
localparam integer ISA_MAX_FIELDS  = 9;
localparam integer ISA_FIELD_W     = 36;
localparam integer ISA_N_ENGINES   = 6;
localparam [1:0] ISA_KIND_U = 2'd0;
localparam [1:0] ISA_KIND_S = 2'd1;
localparam [1:0] ISA_KIND_ENUM = 2'd2;
localparam [1:0] ISA_KIND_F32 = 2'd3;
localparam integer ISA_ENGINE_DMA = 0;
localparam integer ISA_ENGINE_SA = 1;
localparam integer ISA_ENGINE_VU = 2;
localparam integer ISA_ENGINE_PIM = 3;
localparam integer ISA_ENGINE_SYNC = 4;
localparam integer ISA_ENGINE_LINK = 5;
localparam [7:0] OP_NOP = 8'h01;
localparam [7:0] OP_SIGNAL = 8'h02;
localparam [7:0] OP_WAIT = 8'h03;
localparam [7:0] OP_END = 8'h0F;
localparam [7:0] OP_DMA_LOAD = 8'h10;
localparam [7:0] OP_DMA_STORE = 8'h11;
localparam [7:0] OP_SA_LOADW = 8'h20;
localparam [7:0] OP_SA_MATMUL = 8'h21;
localparam [7:0] OP_VU_ADD = 8'h30;
localparam [7:0] OP_VU_MUL = 8'h31;
localparam [7:0] OP_VU_SCALE = 8'h32;
localparam [7:0] OP_VU_LAYERNORM = 8'h33;
localparam [7:0] OP_VU_RMSNORM = 8'h34;
localparam [7:0] OP_VU_SOFTMAX = 8'h35;
localparam [7:0] OP_VU_GELU = 8'h36;
localparam [7:0] OP_VU_SILU = 8'h37;
localparam [7:0] OP_VU_ROPE = 8'h38;
localparam [7:0] OP_VU_COPY = 8'h39;
localparam [7:0] OP_VU_TRANSPOSE = 8'h3A;
localparam [7:0] OP_VU_DOT = 8'h3B;
localparam [7:0] OP_VU_TOPK = 8'h3C;
localparam [7:0] OP_VU_AXPY = 8'h3D;
localparam [7:0] OP_PIM_HEADER = 8'h50;
localparam [7:0] OP_GWRITE = 8'h51;
localparam [7:0] OP_G_ACT = 8'h52;
localparam [7:0] OP_COMP = 8'h53;
localparam [7:0] OP_READRES = 8'h54;
localparam [7:0] OP_PIM_GEMV = 8'h55;
localparam [7:0] OP_PIM_PRECHARGE = 8'h56;
localparam [7:0] OP_ALL_REDUCE = 8'h60;
localparam [7:0] OP_SEND = 8'h61;
localparam [7:0] OP_RECV = 8'h62;
localparam [7:0] OP_ALL_TO_ALL = 8'h63;
localparam integer SIGNAL_SEM_LSB = 8, SIGNAL_SEM_W = 16;
localparam integer SIGNAL_COUNT_LSB = 24, SIGNAL_COUNT_W = 16;
localparam integer WAIT_SEM_LSB = 8, WAIT_SEM_W = 16;
localparam integer WAIT_COUNT_LSB = 24, WAIT_COUNT_W = 16;
localparam integer DMA_LOAD_SPAD_LSB = 8, DMA_LOAD_SPAD_W = 26;
localparam integer DMA_LOAD_HBM_LSB = 34, DMA_LOAD_HBM_W = 36;
localparam integer DMA_LOAD_ROWS_LSB = 70, DMA_LOAD_ROWS_W = 14;
localparam integer DMA_LOAD_COLS_LSB = 84, DMA_LOAD_COLS_W = 14;
localparam integer DMA_LOAD_STRIDE_LSB = 98, DMA_LOAD_STRIDE_W = 28;
localparam integer DMA_LOAD_DTYPE_LSB = 126, DMA_LOAD_DTYPE_W = 2;
localparam integer DMA_STORE_SPAD_LSB = 8, DMA_STORE_SPAD_W = 26;
localparam integer DMA_STORE_HBM_LSB = 34, DMA_STORE_HBM_W = 36;
localparam integer DMA_STORE_ROWS_LSB = 70, DMA_STORE_ROWS_W = 14;
localparam integer DMA_STORE_COLS_LSB = 84, DMA_STORE_COLS_W = 14;
localparam integer DMA_STORE_STRIDE_LSB = 98, DMA_STORE_STRIDE_W = 28;
localparam integer DMA_STORE_DTYPE_LSB = 126, DMA_STORE_DTYPE_W = 2;
localparam integer SA_LOADW_ARRAY_LSB = 8, SA_LOADW_ARRAY_W = 6;
localparam integer SA_LOADW_W_LSB = 14, SA_LOADW_W_W = 26;
localparam integer SA_LOADW_K_LSB = 40, SA_LOADW_K_W = 12;
localparam integer SA_LOADW_N_LSB = 52, SA_LOADW_N_W = 12;
localparam integer SA_LOADW_DTYPE_LSB = 64, SA_LOADW_DTYPE_W = 2;
localparam integer SA_MATMUL_ARRAY_LSB = 8, SA_MATMUL_ARRAY_W = 6;
localparam integer SA_MATMUL_SRC_LSB = 14, SA_MATMUL_SRC_W = 26;
localparam integer SA_MATMUL_DST_LSB = 40, SA_MATMUL_DST_W = 26;
localparam integer SA_MATMUL_M_LSB = 66, SA_MATMUL_M_W = 16;
localparam integer SA_MATMUL_N_LSB = 82, SA_MATMUL_N_W = 12;
localparam integer SA_MATMUL_K_LSB = 94, SA_MATMUL_K_W = 12;
localparam integer SA_MATMUL_ACC_LSB = 106, SA_MATMUL_ACC_W = 1;
localparam integer SA_MATMUL_DTYPE_LSB = 107, SA_MATMUL_DTYPE_W = 2;
localparam integer SA_MATMUL_OUT_DTYPE_LSB = 109, SA_MATMUL_OUT_DTYPE_W = 2;
localparam integer VU_ADD_DST_LSB = 8, VU_ADD_DST_W = 26;
localparam integer VU_ADD_A_LSB = 34, VU_ADD_A_W = 26;
localparam integer VU_ADD_B_LSB = 60, VU_ADD_B_W = 26;
localparam integer VU_ADD_ROWS_LSB = 86, VU_ADD_ROWS_W = 16;
localparam integer VU_ADD_COLS_LSB = 102, VU_ADD_COLS_W = 16;
localparam integer VU_ADD_BCAST_LSB = 118, VU_ADD_BCAST_W = 1;
localparam integer VU_ADD_DTYPE_LSB = 119, VU_ADD_DTYPE_W = 2;
localparam integer VU_MUL_DST_LSB = 8, VU_MUL_DST_W = 26;
localparam integer VU_MUL_A_LSB = 34, VU_MUL_A_W = 26;
localparam integer VU_MUL_B_LSB = 60, VU_MUL_B_W = 26;
localparam integer VU_MUL_ROWS_LSB = 86, VU_MUL_ROWS_W = 16;
localparam integer VU_MUL_COLS_LSB = 102, VU_MUL_COLS_W = 16;
localparam integer VU_MUL_BCAST_LSB = 118, VU_MUL_BCAST_W = 1;
localparam integer VU_MUL_DTYPE_LSB = 119, VU_MUL_DTYPE_W = 2;
localparam integer VU_SCALE_DST_LSB = 8, VU_SCALE_DST_W = 26;
localparam integer VU_SCALE_SRC_LSB = 34, VU_SCALE_SRC_W = 26;
localparam integer VU_SCALE_ROWS_LSB = 60, VU_SCALE_ROWS_W = 16;
localparam integer VU_SCALE_COLS_LSB = 76, VU_SCALE_COLS_W = 16;
localparam integer VU_SCALE_DTYPE_LSB = 92, VU_SCALE_DTYPE_W = 2;
localparam integer VU_SCALE_IMM_LSB = 94, VU_SCALE_IMM_W = 32;
localparam integer VU_LAYERNORM_DST_LSB = 8, VU_LAYERNORM_DST_W = 26;
localparam integer VU_LAYERNORM_SRC_LSB = 34, VU_LAYERNORM_SRC_W = 26;
localparam integer VU_LAYERNORM_PARAMS_LSB = 60, VU_LAYERNORM_PARAMS_W = 26;
localparam integer VU_LAYERNORM_ROWS_LSB = 86, VU_LAYERNORM_ROWS_W = 16;
localparam integer VU_LAYERNORM_COLS_LSB = 102, VU_LAYERNORM_COLS_W = 16;
localparam integer VU_LAYERNORM_DTYPE_LSB = 118, VU_LAYERNORM_DTYPE_W = 2;
localparam integer VU_LAYERNORM_EPS_EXP_LSB = 120, VU_LAYERNORM_EPS_EXP_W = 4;
localparam integer VU_RMSNORM_DST_LSB = 8, VU_RMSNORM_DST_W = 26;
localparam integer VU_RMSNORM_SRC_LSB = 34, VU_RMSNORM_SRC_W = 26;
localparam integer VU_RMSNORM_GAMMA_LSB = 60, VU_RMSNORM_GAMMA_W = 26;
localparam integer VU_RMSNORM_ROWS_LSB = 86, VU_RMSNORM_ROWS_W = 16;
localparam integer VU_RMSNORM_COLS_LSB = 102, VU_RMSNORM_COLS_W = 16;
localparam integer VU_RMSNORM_DTYPE_LSB = 118, VU_RMSNORM_DTYPE_W = 2;
localparam integer VU_RMSNORM_EPS_EXP_LSB = 120, VU_RMSNORM_EPS_EXP_W = 4;
localparam integer VU_SOFTMAX_DST_LSB = 8, VU_SOFTMAX_DST_W = 26;
localparam integer VU_SOFTMAX_SRC_LSB = 34, VU_SOFTMAX_SRC_W = 26;
localparam integer VU_SOFTMAX_ROWS_LSB = 60, VU_SOFTMAX_ROWS_W = 16;
localparam integer VU_SOFTMAX_COLS_LSB = 76, VU_SOFTMAX_COLS_W = 16;
localparam integer VU_SOFTMAX_DTYPE_LSB = 92, VU_SOFTMAX_DTYPE_W = 2;
localparam integer VU_SOFTMAX_MASK_LSB = 94, VU_SOFTMAX_MASK_W = 2;
localparam integer VU_SOFTMAX_LEN_LSB = 96, VU_SOFTMAX_LEN_W = 16;
localparam integer VU_SOFTMAX_LSE_LSB = 112, VU_SOFTMAX_LSE_W = 1;
localparam integer VU_GELU_DST_LSB = 8, VU_GELU_DST_W = 26;
localparam integer VU_GELU_SRC_LSB = 34, VU_GELU_SRC_W = 26;
localparam integer VU_GELU_ROWS_LSB = 60, VU_GELU_ROWS_W = 16;
localparam integer VU_GELU_COLS_LSB = 76, VU_GELU_COLS_W = 16;
localparam integer VU_GELU_DTYPE_LSB = 92, VU_GELU_DTYPE_W = 2;
localparam integer VU_GELU_FORM_LSB = 94, VU_GELU_FORM_W = 1;
localparam integer VU_SILU_DST_LSB = 8, VU_SILU_DST_W = 26;
localparam integer VU_SILU_SRC_LSB = 34, VU_SILU_SRC_W = 26;
localparam integer VU_SILU_ROWS_LSB = 60, VU_SILU_ROWS_W = 16;
localparam integer VU_SILU_COLS_LSB = 76, VU_SILU_COLS_W = 16;
localparam integer VU_SILU_DTYPE_LSB = 92, VU_SILU_DTYPE_W = 2;
localparam integer VU_ROPE_DST_LSB = 8, VU_ROPE_DST_W = 26;
localparam integer VU_ROPE_SRC_LSB = 34, VU_ROPE_SRC_W = 26;
localparam integer VU_ROPE_TABLE_LSB = 60, VU_ROPE_TABLE_W = 26;
localparam integer VU_ROPE_ROWS_LSB = 86, VU_ROPE_ROWS_W = 16;
localparam integer VU_ROPE_COLS_LSB = 102, VU_ROPE_COLS_W = 16;
localparam integer VU_ROPE_HALF_DIM_LSB = 118, VU_ROPE_HALF_DIM_W = 8;
localparam integer VU_ROPE_DTYPE_LSB = 126, VU_ROPE_DTYPE_W = 2;
localparam integer VU_COPY_DST_LSB = 8, VU_COPY_DST_W = 26;
localparam integer VU_COPY_SRC_LSB = 34, VU_COPY_SRC_W = 26;
localparam integer VU_COPY_ROWS_LSB = 60, VU_COPY_ROWS_W = 16;
localparam integer VU_COPY_COLS_LSB = 76, VU_COPY_COLS_W = 16;
localparam integer VU_COPY_SRC_STRIDE_LSB = 92, VU_COPY_SRC_STRIDE_W = 16;
localparam integer VU_COPY_DST_STRIDE_LSB = 108, VU_COPY_DST_STRIDE_W = 16;
localparam integer VU_COPY_DTYPE_LSB = 124, VU_COPY_DTYPE_W = 2;
localparam integer VU_COPY_OUT_DTYPE_LSB = 126, VU_COPY_OUT_DTYPE_W = 2;
localparam integer VU_TRANSPOSE_DST_LSB = 8, VU_TRANSPOSE_DST_W = 26;
localparam integer VU_TRANSPOSE_SRC_LSB = 34, VU_TRANSPOSE_SRC_W = 26;
localparam integer VU_TRANSPOSE_ROWS_LSB = 60, VU_TRANSPOSE_ROWS_W = 16;
localparam integer VU_TRANSPOSE_COLS_LSB = 76, VU_TRANSPOSE_COLS_W = 16;
localparam integer VU_TRANSPOSE_DTYPE_LSB = 92, VU_TRANSPOSE_DTYPE_W = 2;
localparam integer VU_DOT_DST_LSB = 8, VU_DOT_DST_W = 26;
localparam integer VU_DOT_MAT_LSB = 34, VU_DOT_MAT_W = 26;
localparam integer VU_DOT_VEC_LSB = 60, VU_DOT_VEC_W = 26;
localparam integer VU_DOT_ROWS_LSB = 86, VU_DOT_ROWS_W = 16;
localparam integer VU_DOT_COLS_LSB = 102, VU_DOT_COLS_W = 16;
localparam integer VU_DOT_TRANS_LSB = 118, VU_DOT_TRANS_W = 1;
localparam integer VU_DOT_DTYPE_LSB = 119, VU_DOT_DTYPE_W = 2;
localparam integer VU_DOT_OUT_DTYPE_LSB = 121, VU_DOT_OUT_DTYPE_W = 2;
localparam integer VU_DOT_ORDER_LSB = 123, VU_DOT_ORDER_W = 1;
localparam integer VU_TOPK_DST_LSB = 8, VU_TOPK_DST_W = 26;
localparam integer VU_TOPK_SRC_LSB = 34, VU_TOPK_SRC_W = 26;
localparam integer VU_TOPK_ROWS_LSB = 60, VU_TOPK_ROWS_W = 16;
localparam integer VU_TOPK_COLS_LSB = 76, VU_TOPK_COLS_W = 12;
localparam integer VU_TOPK_K_LSB = 88, VU_TOPK_K_W = 8;
localparam integer VU_TOPK_DTYPE_LSB = 96, VU_TOPK_DTYPE_W = 2;
localparam integer VU_TOPK_OUT_DTYPE_LSB = 98, VU_TOPK_OUT_DTYPE_W = 2;
localparam integer VU_AXPY_DST_LSB = 8, VU_AXPY_DST_W = 26;
localparam integer VU_AXPY_X_LSB = 34, VU_AXPY_X_W = 26;
localparam integer VU_AXPY_SCALE_LSB = 60, VU_AXPY_SCALE_W = 26;
localparam integer VU_AXPY_ROWS_LSB = 86, VU_AXPY_ROWS_W = 16;
localparam integer VU_AXPY_COLS_LSB = 102, VU_AXPY_COLS_W = 16;
localparam integer VU_AXPY_ACC_LSB = 118, VU_AXPY_ACC_W = 1;
localparam integer VU_AXPY_DTYPE_LSB = 119, VU_AXPY_DTYPE_W = 2;
localparam integer PIM_HEADER_CHANNEL_LSB = 8, PIM_HEADER_CHANNEL_W = 10;
localparam integer PIM_HEADER_N_GEMVS_LSB = 18, PIM_HEADER_N_GEMVS_W = 16;
localparam integer GWRITE_CHANNEL_LSB = 8, GWRITE_CHANNEL_W = 10;
localparam integer GWRITE_SRC_LSB = 18, GWRITE_SRC_W = 26;
localparam integer GWRITE_LEN_LSB = 44, GWRITE_LEN_W = 12;
localparam integer GWRITE_DTYPE_LSB = 56, GWRITE_DTYPE_W = 2;
localparam integer G_ACT_CHANNEL_LSB = 8, G_ACT_CHANNEL_W = 10;
localparam integer G_ACT_ROW_LSB = 18, G_ACT_ROW_W = 20;
localparam integer G_ACT_BG_MASK_LSB = 38, G_ACT_BG_MASK_W = 16;
localparam integer COMP_CHANNEL_LSB = 8, COMP_CHANNEL_W = 10;
localparam integer COMP_COL_LSB = 18, COMP_COL_W = 8;
localparam integer COMP_N_COMPS_LSB = 26, COMP_N_COMPS_W = 12;
localparam integer COMP_DTYPE_LSB = 38, COMP_DTYPE_W = 2;
localparam integer READRES_CHANNEL_LSB = 8, READRES_CHANNEL_W = 10;
localparam integer READRES_DST_LSB = 18, READRES_DST_W = 26;
localparam integer READRES_DTYPE_LSB = 44, READRES_DTYPE_W = 2;
localparam integer PIM_GEMV_CHANNEL_LSB = 8, PIM_GEMV_CHANNEL_W = 10;
localparam integer PIM_GEMV_COL_LSB = 18, PIM_GEMV_COL_W = 8;
localparam integer PIM_GEMV_N_COMPS_LSB = 26, PIM_GEMV_N_COMPS_W = 12;
localparam integer PIM_GEMV_DST_LSB = 38, PIM_GEMV_DST_W = 26;
localparam integer PIM_GEMV_DTYPE_LSB = 64, PIM_GEMV_DTYPE_W = 2;
localparam integer PIM_GEMV_OUT_DTYPE_LSB = 66, PIM_GEMV_OUT_DTYPE_W = 2;
localparam integer PIM_PRECHARGE_CHANNEL_LSB = 8, PIM_PRECHARGE_CHANNEL_W = 10;
localparam integer PIM_PRECHARGE_BG_MASK_LSB = 18, PIM_PRECHARGE_BG_MASK_W = 16;
localparam integer ALL_REDUCE_BYTES_LSB = 8, ALL_REDUCE_BYTES_W = 36;
localparam integer ALL_REDUCE_GROUP_LSB = 44, ALL_REDUCE_GROUP_W = 10;
localparam integer ALL_REDUCE_ALGO_LSB = 54, ALL_REDUCE_ALGO_W = 2;
localparam integer SEND_BYTES_LSB = 8, SEND_BYTES_W = 36;
localparam integer SEND_PEER_LSB = 44, SEND_PEER_W = 10;
localparam integer RECV_BYTES_LSB = 8, RECV_BYTES_W = 36;
localparam integer RECV_PEER_LSB = 44, RECV_PEER_W = 10;
localparam integer ALL_TO_ALL_BYTES_LSB = 8, ALL_TO_ALL_BYTES_W = 36;
localparam integer ALL_TO_ALL_GROUP_LSB = 44, ALL_TO_ALL_GROUP_W = 10;

function isa_known;
    input [7:0] op;
    begin
        case (op)
            OP_NOP: isa_known = 1'b1;
            OP_SIGNAL: isa_known = 1'b1;
            OP_WAIT: isa_known = 1'b1;
            OP_END: isa_known = 1'b1;
            OP_DMA_LOAD: isa_known = 1'b1;
            OP_DMA_STORE: isa_known = 1'b1;
            OP_SA_LOADW: isa_known = 1'b1;
            OP_SA_MATMUL: isa_known = 1'b1;
            OP_VU_ADD: isa_known = 1'b1;
            OP_VU_MUL: isa_known = 1'b1;
            OP_VU_SCALE: isa_known = 1'b1;
            OP_VU_LAYERNORM: isa_known = 1'b1;
            OP_VU_RMSNORM: isa_known = 1'b1;
            OP_VU_SOFTMAX: isa_known = 1'b1;
            OP_VU_GELU: isa_known = 1'b1;
            OP_VU_SILU: isa_known = 1'b1;
            OP_VU_ROPE: isa_known = 1'b1;
            OP_VU_COPY: isa_known = 1'b1;
            OP_VU_TRANSPOSE: isa_known = 1'b1;
            OP_VU_DOT: isa_known = 1'b1;
            OP_VU_TOPK: isa_known = 1'b1;
            OP_VU_AXPY: isa_known = 1'b1;
            OP_PIM_HEADER: isa_known = 1'b1;
            OP_GWRITE: isa_known = 1'b1;
            OP_G_ACT: isa_known = 1'b1;
            OP_COMP: isa_known = 1'b1;
            OP_READRES: isa_known = 1'b1;
            OP_PIM_GEMV: isa_known = 1'b1;
            OP_PIM_PRECHARGE: isa_known = 1'b1;
            OP_ALL_REDUCE: isa_known = 1'b1;
            OP_SEND: isa_known = 1'b1;
            OP_RECV: isa_known = 1'b1;
            OP_ALL_TO_ALL: isa_known = 1'b1;
            default: isa_known = 1'b0;
        endcase
    end
endfunction

function [7:0] isa_used_bits;
    input [7:0] op;
    begin
        case (op)
            OP_NOP: isa_used_bits = 8'd8;
            OP_SIGNAL: isa_used_bits = 8'd40;
            OP_WAIT: isa_used_bits = 8'd40;
            OP_END: isa_used_bits = 8'd8;
            OP_DMA_LOAD: isa_used_bits = 8'd128;
            OP_DMA_STORE: isa_used_bits = 8'd128;
            OP_SA_LOADW: isa_used_bits = 8'd66;
            OP_SA_MATMUL: isa_used_bits = 8'd111;
            OP_VU_ADD: isa_used_bits = 8'd121;
            OP_VU_MUL: isa_used_bits = 8'd121;
            OP_VU_SCALE: isa_used_bits = 8'd126;
            OP_VU_LAYERNORM: isa_used_bits = 8'd124;
            OP_VU_RMSNORM: isa_used_bits = 8'd124;
            OP_VU_SOFTMAX: isa_used_bits = 8'd113;
            OP_VU_GELU: isa_used_bits = 8'd95;
            OP_VU_SILU: isa_used_bits = 8'd94;
            OP_VU_ROPE: isa_used_bits = 8'd128;
            OP_VU_COPY: isa_used_bits = 8'd128;
            OP_VU_TRANSPOSE: isa_used_bits = 8'd94;
            OP_VU_DOT: isa_used_bits = 8'd124;
            OP_VU_TOPK: isa_used_bits = 8'd100;
            OP_VU_AXPY: isa_used_bits = 8'd121;
            OP_PIM_HEADER: isa_used_bits = 8'd34;
            OP_GWRITE: isa_used_bits = 8'd58;
            OP_G_ACT: isa_used_bits = 8'd54;
            OP_COMP: isa_used_bits = 8'd40;
            OP_READRES: isa_used_bits = 8'd46;
            OP_PIM_GEMV: isa_used_bits = 8'd68;
            OP_PIM_PRECHARGE: isa_used_bits = 8'd34;
            OP_ALL_REDUCE: isa_used_bits = 8'd56;
            OP_SEND: isa_used_bits = 8'd54;
            OP_RECV: isa_used_bits = 8'd54;
            OP_ALL_TO_ALL: isa_used_bits = 8'd54;
            default: isa_used_bits = 8'd0;
        endcase
    end
endfunction

function [2:0] isa_engine;
    input [7:0] op;
    begin
        case (op)
            OP_NOP: isa_engine = ISA_ENGINE_SYNC;
            OP_SIGNAL: isa_engine = ISA_ENGINE_SYNC;
            OP_WAIT: isa_engine = ISA_ENGINE_SYNC;
            OP_END: isa_engine = ISA_ENGINE_SYNC;
            OP_DMA_LOAD: isa_engine = ISA_ENGINE_DMA;
            OP_DMA_STORE: isa_engine = ISA_ENGINE_DMA;
            OP_SA_LOADW: isa_engine = ISA_ENGINE_SA;
            OP_SA_MATMUL: isa_engine = ISA_ENGINE_SA;
            OP_VU_ADD: isa_engine = ISA_ENGINE_VU;
            OP_VU_MUL: isa_engine = ISA_ENGINE_VU;
            OP_VU_SCALE: isa_engine = ISA_ENGINE_VU;
            OP_VU_LAYERNORM: isa_engine = ISA_ENGINE_VU;
            OP_VU_RMSNORM: isa_engine = ISA_ENGINE_VU;
            OP_VU_SOFTMAX: isa_engine = ISA_ENGINE_VU;
            OP_VU_GELU: isa_engine = ISA_ENGINE_VU;
            OP_VU_SILU: isa_engine = ISA_ENGINE_VU;
            OP_VU_ROPE: isa_engine = ISA_ENGINE_VU;
            OP_VU_COPY: isa_engine = ISA_ENGINE_VU;
            OP_VU_TRANSPOSE: isa_engine = ISA_ENGINE_VU;
            OP_VU_DOT: isa_engine = ISA_ENGINE_VU;
            OP_VU_TOPK: isa_engine = ISA_ENGINE_VU;
            OP_VU_AXPY: isa_engine = ISA_ENGINE_VU;
            OP_PIM_HEADER: isa_engine = ISA_ENGINE_PIM;
            OP_GWRITE: isa_engine = ISA_ENGINE_PIM;
            OP_G_ACT: isa_engine = ISA_ENGINE_PIM;
            OP_COMP: isa_engine = ISA_ENGINE_PIM;
            OP_READRES: isa_engine = ISA_ENGINE_PIM;
            OP_PIM_GEMV: isa_engine = ISA_ENGINE_PIM;
            OP_PIM_PRECHARGE: isa_engine = ISA_ENGINE_PIM;
            OP_ALL_REDUCE: isa_engine = ISA_ENGINE_LINK;
            OP_SEND: isa_engine = ISA_ENGINE_LINK;
            OP_RECV: isa_engine = ISA_ENGINE_LINK;
            OP_ALL_TO_ALL: isa_engine = ISA_ENGINE_LINK;
            default: isa_engine = 0;
        endcase
    end
endfunction

function [3:0] isa_n_fields;
    input [7:0] op;
    begin
        case (op)
            OP_NOP: isa_n_fields = 4'd0;
            OP_SIGNAL: isa_n_fields = 4'd2;
            OP_WAIT: isa_n_fields = 4'd2;
            OP_END: isa_n_fields = 4'd0;
            OP_DMA_LOAD: isa_n_fields = 4'd6;
            OP_DMA_STORE: isa_n_fields = 4'd6;
            OP_SA_LOADW: isa_n_fields = 4'd5;
            OP_SA_MATMUL: isa_n_fields = 4'd9;
            OP_VU_ADD: isa_n_fields = 4'd7;
            OP_VU_MUL: isa_n_fields = 4'd7;
            OP_VU_SCALE: isa_n_fields = 4'd6;
            OP_VU_LAYERNORM: isa_n_fields = 4'd7;
            OP_VU_RMSNORM: isa_n_fields = 4'd7;
            OP_VU_SOFTMAX: isa_n_fields = 4'd8;
            OP_VU_GELU: isa_n_fields = 4'd6;
            OP_VU_SILU: isa_n_fields = 4'd5;
            OP_VU_ROPE: isa_n_fields = 4'd7;
            OP_VU_COPY: isa_n_fields = 4'd8;
            OP_VU_TRANSPOSE: isa_n_fields = 4'd5;
            OP_VU_DOT: isa_n_fields = 4'd9;
            OP_VU_TOPK: isa_n_fields = 4'd7;
            OP_VU_AXPY: isa_n_fields = 4'd7;
            OP_PIM_HEADER: isa_n_fields = 4'd2;
            OP_GWRITE: isa_n_fields = 4'd4;
            OP_G_ACT: isa_n_fields = 4'd3;
            OP_COMP: isa_n_fields = 4'd4;
            OP_READRES: isa_n_fields = 4'd3;
            OP_PIM_GEMV: isa_n_fields = 4'd6;
            OP_PIM_PRECHARGE: isa_n_fields = 4'd2;
            OP_ALL_REDUCE: isa_n_fields = 4'd3;
            OP_SEND: isa_n_fields = 4'd2;
            OP_RECV: isa_n_fields = 4'd2;
            OP_ALL_TO_ALL: isa_n_fields = 4'd2;
            default: isa_n_fields = 4'd0;
        endcase
    end
endfunction

function [7:0] isa_field_lsb;
    input [7:0] op;
    input [3:0] slot;
    begin
        isa_field_lsb = 8'd0;
        case (op)
            OP_SIGNAL:
                case (slot)
                    4'd0: isa_field_lsb = SIGNAL_SEM_LSB;
                    4'd1: isa_field_lsb = SIGNAL_COUNT_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_WAIT:
                case (slot)
                    4'd0: isa_field_lsb = WAIT_SEM_LSB;
                    4'd1: isa_field_lsb = WAIT_COUNT_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_DMA_LOAD:
                case (slot)
                    4'd0: isa_field_lsb = DMA_LOAD_SPAD_LSB;
                    4'd1: isa_field_lsb = DMA_LOAD_HBM_LSB;
                    4'd2: isa_field_lsb = DMA_LOAD_ROWS_LSB;
                    4'd3: isa_field_lsb = DMA_LOAD_COLS_LSB;
                    4'd4: isa_field_lsb = DMA_LOAD_STRIDE_LSB;
                    4'd5: isa_field_lsb = DMA_LOAD_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_DMA_STORE:
                case (slot)
                    4'd0: isa_field_lsb = DMA_STORE_SPAD_LSB;
                    4'd1: isa_field_lsb = DMA_STORE_HBM_LSB;
                    4'd2: isa_field_lsb = DMA_STORE_ROWS_LSB;
                    4'd3: isa_field_lsb = DMA_STORE_COLS_LSB;
                    4'd4: isa_field_lsb = DMA_STORE_STRIDE_LSB;
                    4'd5: isa_field_lsb = DMA_STORE_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_SA_LOADW:
                case (slot)
                    4'd0: isa_field_lsb = SA_LOADW_ARRAY_LSB;
                    4'd1: isa_field_lsb = SA_LOADW_W_LSB;
                    4'd2: isa_field_lsb = SA_LOADW_K_LSB;
                    4'd3: isa_field_lsb = SA_LOADW_N_LSB;
                    4'd4: isa_field_lsb = SA_LOADW_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_SA_MATMUL:
                case (slot)
                    4'd0: isa_field_lsb = SA_MATMUL_ARRAY_LSB;
                    4'd1: isa_field_lsb = SA_MATMUL_SRC_LSB;
                    4'd2: isa_field_lsb = SA_MATMUL_DST_LSB;
                    4'd3: isa_field_lsb = SA_MATMUL_M_LSB;
                    4'd4: isa_field_lsb = SA_MATMUL_N_LSB;
                    4'd5: isa_field_lsb = SA_MATMUL_K_LSB;
                    4'd6: isa_field_lsb = SA_MATMUL_ACC_LSB;
                    4'd7: isa_field_lsb = SA_MATMUL_DTYPE_LSB;
                    4'd8: isa_field_lsb = SA_MATMUL_OUT_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_ADD:
                case (slot)
                    4'd0: isa_field_lsb = VU_ADD_DST_LSB;
                    4'd1: isa_field_lsb = VU_ADD_A_LSB;
                    4'd2: isa_field_lsb = VU_ADD_B_LSB;
                    4'd3: isa_field_lsb = VU_ADD_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_ADD_COLS_LSB;
                    4'd5: isa_field_lsb = VU_ADD_BCAST_LSB;
                    4'd6: isa_field_lsb = VU_ADD_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_MUL:
                case (slot)
                    4'd0: isa_field_lsb = VU_MUL_DST_LSB;
                    4'd1: isa_field_lsb = VU_MUL_A_LSB;
                    4'd2: isa_field_lsb = VU_MUL_B_LSB;
                    4'd3: isa_field_lsb = VU_MUL_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_MUL_COLS_LSB;
                    4'd5: isa_field_lsb = VU_MUL_BCAST_LSB;
                    4'd6: isa_field_lsb = VU_MUL_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_SCALE:
                case (slot)
                    4'd0: isa_field_lsb = VU_SCALE_DST_LSB;
                    4'd1: isa_field_lsb = VU_SCALE_SRC_LSB;
                    4'd2: isa_field_lsb = VU_SCALE_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_SCALE_COLS_LSB;
                    4'd4: isa_field_lsb = VU_SCALE_DTYPE_LSB;
                    4'd5: isa_field_lsb = VU_SCALE_IMM_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_LAYERNORM:
                case (slot)
                    4'd0: isa_field_lsb = VU_LAYERNORM_DST_LSB;
                    4'd1: isa_field_lsb = VU_LAYERNORM_SRC_LSB;
                    4'd2: isa_field_lsb = VU_LAYERNORM_PARAMS_LSB;
                    4'd3: isa_field_lsb = VU_LAYERNORM_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_LAYERNORM_COLS_LSB;
                    4'd5: isa_field_lsb = VU_LAYERNORM_DTYPE_LSB;
                    4'd6: isa_field_lsb = VU_LAYERNORM_EPS_EXP_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_RMSNORM:
                case (slot)
                    4'd0: isa_field_lsb = VU_RMSNORM_DST_LSB;
                    4'd1: isa_field_lsb = VU_RMSNORM_SRC_LSB;
                    4'd2: isa_field_lsb = VU_RMSNORM_GAMMA_LSB;
                    4'd3: isa_field_lsb = VU_RMSNORM_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_RMSNORM_COLS_LSB;
                    4'd5: isa_field_lsb = VU_RMSNORM_DTYPE_LSB;
                    4'd6: isa_field_lsb = VU_RMSNORM_EPS_EXP_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_SOFTMAX:
                case (slot)
                    4'd0: isa_field_lsb = VU_SOFTMAX_DST_LSB;
                    4'd1: isa_field_lsb = VU_SOFTMAX_SRC_LSB;
                    4'd2: isa_field_lsb = VU_SOFTMAX_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_SOFTMAX_COLS_LSB;
                    4'd4: isa_field_lsb = VU_SOFTMAX_DTYPE_LSB;
                    4'd5: isa_field_lsb = VU_SOFTMAX_MASK_LSB;
                    4'd6: isa_field_lsb = VU_SOFTMAX_LEN_LSB;
                    4'd7: isa_field_lsb = VU_SOFTMAX_LSE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_GELU:
                case (slot)
                    4'd0: isa_field_lsb = VU_GELU_DST_LSB;
                    4'd1: isa_field_lsb = VU_GELU_SRC_LSB;
                    4'd2: isa_field_lsb = VU_GELU_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_GELU_COLS_LSB;
                    4'd4: isa_field_lsb = VU_GELU_DTYPE_LSB;
                    4'd5: isa_field_lsb = VU_GELU_FORM_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_SILU:
                case (slot)
                    4'd0: isa_field_lsb = VU_SILU_DST_LSB;
                    4'd1: isa_field_lsb = VU_SILU_SRC_LSB;
                    4'd2: isa_field_lsb = VU_SILU_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_SILU_COLS_LSB;
                    4'd4: isa_field_lsb = VU_SILU_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_ROPE:
                case (slot)
                    4'd0: isa_field_lsb = VU_ROPE_DST_LSB;
                    4'd1: isa_field_lsb = VU_ROPE_SRC_LSB;
                    4'd2: isa_field_lsb = VU_ROPE_TABLE_LSB;
                    4'd3: isa_field_lsb = VU_ROPE_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_ROPE_COLS_LSB;
                    4'd5: isa_field_lsb = VU_ROPE_HALF_DIM_LSB;
                    4'd6: isa_field_lsb = VU_ROPE_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_COPY:
                case (slot)
                    4'd0: isa_field_lsb = VU_COPY_DST_LSB;
                    4'd1: isa_field_lsb = VU_COPY_SRC_LSB;
                    4'd2: isa_field_lsb = VU_COPY_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_COPY_COLS_LSB;
                    4'd4: isa_field_lsb = VU_COPY_SRC_STRIDE_LSB;
                    4'd5: isa_field_lsb = VU_COPY_DST_STRIDE_LSB;
                    4'd6: isa_field_lsb = VU_COPY_DTYPE_LSB;
                    4'd7: isa_field_lsb = VU_COPY_OUT_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_TRANSPOSE:
                case (slot)
                    4'd0: isa_field_lsb = VU_TRANSPOSE_DST_LSB;
                    4'd1: isa_field_lsb = VU_TRANSPOSE_SRC_LSB;
                    4'd2: isa_field_lsb = VU_TRANSPOSE_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_TRANSPOSE_COLS_LSB;
                    4'd4: isa_field_lsb = VU_TRANSPOSE_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_DOT:
                case (slot)
                    4'd0: isa_field_lsb = VU_DOT_DST_LSB;
                    4'd1: isa_field_lsb = VU_DOT_MAT_LSB;
                    4'd2: isa_field_lsb = VU_DOT_VEC_LSB;
                    4'd3: isa_field_lsb = VU_DOT_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_DOT_COLS_LSB;
                    4'd5: isa_field_lsb = VU_DOT_TRANS_LSB;
                    4'd6: isa_field_lsb = VU_DOT_DTYPE_LSB;
                    4'd7: isa_field_lsb = VU_DOT_OUT_DTYPE_LSB;
                    4'd8: isa_field_lsb = VU_DOT_ORDER_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_TOPK:
                case (slot)
                    4'd0: isa_field_lsb = VU_TOPK_DST_LSB;
                    4'd1: isa_field_lsb = VU_TOPK_SRC_LSB;
                    4'd2: isa_field_lsb = VU_TOPK_ROWS_LSB;
                    4'd3: isa_field_lsb = VU_TOPK_COLS_LSB;
                    4'd4: isa_field_lsb = VU_TOPK_K_LSB;
                    4'd5: isa_field_lsb = VU_TOPK_DTYPE_LSB;
                    4'd6: isa_field_lsb = VU_TOPK_OUT_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_VU_AXPY:
                case (slot)
                    4'd0: isa_field_lsb = VU_AXPY_DST_LSB;
                    4'd1: isa_field_lsb = VU_AXPY_X_LSB;
                    4'd2: isa_field_lsb = VU_AXPY_SCALE_LSB;
                    4'd3: isa_field_lsb = VU_AXPY_ROWS_LSB;
                    4'd4: isa_field_lsb = VU_AXPY_COLS_LSB;
                    4'd5: isa_field_lsb = VU_AXPY_ACC_LSB;
                    4'd6: isa_field_lsb = VU_AXPY_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_PIM_HEADER:
                case (slot)
                    4'd0: isa_field_lsb = PIM_HEADER_CHANNEL_LSB;
                    4'd1: isa_field_lsb = PIM_HEADER_N_GEMVS_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_GWRITE:
                case (slot)
                    4'd0: isa_field_lsb = GWRITE_CHANNEL_LSB;
                    4'd1: isa_field_lsb = GWRITE_SRC_LSB;
                    4'd2: isa_field_lsb = GWRITE_LEN_LSB;
                    4'd3: isa_field_lsb = GWRITE_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_G_ACT:
                case (slot)
                    4'd0: isa_field_lsb = G_ACT_CHANNEL_LSB;
                    4'd1: isa_field_lsb = G_ACT_ROW_LSB;
                    4'd2: isa_field_lsb = G_ACT_BG_MASK_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_COMP:
                case (slot)
                    4'd0: isa_field_lsb = COMP_CHANNEL_LSB;
                    4'd1: isa_field_lsb = COMP_COL_LSB;
                    4'd2: isa_field_lsb = COMP_N_COMPS_LSB;
                    4'd3: isa_field_lsb = COMP_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_READRES:
                case (slot)
                    4'd0: isa_field_lsb = READRES_CHANNEL_LSB;
                    4'd1: isa_field_lsb = READRES_DST_LSB;
                    4'd2: isa_field_lsb = READRES_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_PIM_GEMV:
                case (slot)
                    4'd0: isa_field_lsb = PIM_GEMV_CHANNEL_LSB;
                    4'd1: isa_field_lsb = PIM_GEMV_COL_LSB;
                    4'd2: isa_field_lsb = PIM_GEMV_N_COMPS_LSB;
                    4'd3: isa_field_lsb = PIM_GEMV_DST_LSB;
                    4'd4: isa_field_lsb = PIM_GEMV_DTYPE_LSB;
                    4'd5: isa_field_lsb = PIM_GEMV_OUT_DTYPE_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_PIM_PRECHARGE:
                case (slot)
                    4'd0: isa_field_lsb = PIM_PRECHARGE_CHANNEL_LSB;
                    4'd1: isa_field_lsb = PIM_PRECHARGE_BG_MASK_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_ALL_REDUCE:
                case (slot)
                    4'd0: isa_field_lsb = ALL_REDUCE_BYTES_LSB;
                    4'd1: isa_field_lsb = ALL_REDUCE_GROUP_LSB;
                    4'd2: isa_field_lsb = ALL_REDUCE_ALGO_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_SEND:
                case (slot)
                    4'd0: isa_field_lsb = SEND_BYTES_LSB;
                    4'd1: isa_field_lsb = SEND_PEER_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_RECV:
                case (slot)
                    4'd0: isa_field_lsb = RECV_BYTES_LSB;
                    4'd1: isa_field_lsb = RECV_PEER_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            OP_ALL_TO_ALL:
                case (slot)
                    4'd0: isa_field_lsb = ALL_TO_ALL_BYTES_LSB;
                    4'd1: isa_field_lsb = ALL_TO_ALL_GROUP_LSB;
                    default: isa_field_lsb = 8'd0;
                endcase
            default: isa_field_lsb = 8'd0;
        endcase
    end
endfunction

function [7:0] isa_field_width;
    input [7:0] op;
    input [3:0] slot;
    begin
        isa_field_width = 8'd0;
        case (op)
            OP_SIGNAL:
                case (slot)
                    4'd0: isa_field_width = SIGNAL_SEM_W;
                    4'd1: isa_field_width = SIGNAL_COUNT_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_WAIT:
                case (slot)
                    4'd0: isa_field_width = WAIT_SEM_W;
                    4'd1: isa_field_width = WAIT_COUNT_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_DMA_LOAD:
                case (slot)
                    4'd0: isa_field_width = DMA_LOAD_SPAD_W;
                    4'd1: isa_field_width = DMA_LOAD_HBM_W;
                    4'd2: isa_field_width = DMA_LOAD_ROWS_W;
                    4'd3: isa_field_width = DMA_LOAD_COLS_W;
                    4'd4: isa_field_width = DMA_LOAD_STRIDE_W;
                    4'd5: isa_field_width = DMA_LOAD_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_DMA_STORE:
                case (slot)
                    4'd0: isa_field_width = DMA_STORE_SPAD_W;
                    4'd1: isa_field_width = DMA_STORE_HBM_W;
                    4'd2: isa_field_width = DMA_STORE_ROWS_W;
                    4'd3: isa_field_width = DMA_STORE_COLS_W;
                    4'd4: isa_field_width = DMA_STORE_STRIDE_W;
                    4'd5: isa_field_width = DMA_STORE_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_SA_LOADW:
                case (slot)
                    4'd0: isa_field_width = SA_LOADW_ARRAY_W;
                    4'd1: isa_field_width = SA_LOADW_W_W;
                    4'd2: isa_field_width = SA_LOADW_K_W;
                    4'd3: isa_field_width = SA_LOADW_N_W;
                    4'd4: isa_field_width = SA_LOADW_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_SA_MATMUL:
                case (slot)
                    4'd0: isa_field_width = SA_MATMUL_ARRAY_W;
                    4'd1: isa_field_width = SA_MATMUL_SRC_W;
                    4'd2: isa_field_width = SA_MATMUL_DST_W;
                    4'd3: isa_field_width = SA_MATMUL_M_W;
                    4'd4: isa_field_width = SA_MATMUL_N_W;
                    4'd5: isa_field_width = SA_MATMUL_K_W;
                    4'd6: isa_field_width = SA_MATMUL_ACC_W;
                    4'd7: isa_field_width = SA_MATMUL_DTYPE_W;
                    4'd8: isa_field_width = SA_MATMUL_OUT_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_ADD:
                case (slot)
                    4'd0: isa_field_width = VU_ADD_DST_W;
                    4'd1: isa_field_width = VU_ADD_A_W;
                    4'd2: isa_field_width = VU_ADD_B_W;
                    4'd3: isa_field_width = VU_ADD_ROWS_W;
                    4'd4: isa_field_width = VU_ADD_COLS_W;
                    4'd5: isa_field_width = VU_ADD_BCAST_W;
                    4'd6: isa_field_width = VU_ADD_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_MUL:
                case (slot)
                    4'd0: isa_field_width = VU_MUL_DST_W;
                    4'd1: isa_field_width = VU_MUL_A_W;
                    4'd2: isa_field_width = VU_MUL_B_W;
                    4'd3: isa_field_width = VU_MUL_ROWS_W;
                    4'd4: isa_field_width = VU_MUL_COLS_W;
                    4'd5: isa_field_width = VU_MUL_BCAST_W;
                    4'd6: isa_field_width = VU_MUL_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_SCALE:
                case (slot)
                    4'd0: isa_field_width = VU_SCALE_DST_W;
                    4'd1: isa_field_width = VU_SCALE_SRC_W;
                    4'd2: isa_field_width = VU_SCALE_ROWS_W;
                    4'd3: isa_field_width = VU_SCALE_COLS_W;
                    4'd4: isa_field_width = VU_SCALE_DTYPE_W;
                    4'd5: isa_field_width = VU_SCALE_IMM_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_LAYERNORM:
                case (slot)
                    4'd0: isa_field_width = VU_LAYERNORM_DST_W;
                    4'd1: isa_field_width = VU_LAYERNORM_SRC_W;
                    4'd2: isa_field_width = VU_LAYERNORM_PARAMS_W;
                    4'd3: isa_field_width = VU_LAYERNORM_ROWS_W;
                    4'd4: isa_field_width = VU_LAYERNORM_COLS_W;
                    4'd5: isa_field_width = VU_LAYERNORM_DTYPE_W;
                    4'd6: isa_field_width = VU_LAYERNORM_EPS_EXP_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_RMSNORM:
                case (slot)
                    4'd0: isa_field_width = VU_RMSNORM_DST_W;
                    4'd1: isa_field_width = VU_RMSNORM_SRC_W;
                    4'd2: isa_field_width = VU_RMSNORM_GAMMA_W;
                    4'd3: isa_field_width = VU_RMSNORM_ROWS_W;
                    4'd4: isa_field_width = VU_RMSNORM_COLS_W;
                    4'd5: isa_field_width = VU_RMSNORM_DTYPE_W;
                    4'd6: isa_field_width = VU_RMSNORM_EPS_EXP_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_SOFTMAX:
                case (slot)
                    4'd0: isa_field_width = VU_SOFTMAX_DST_W;
                    4'd1: isa_field_width = VU_SOFTMAX_SRC_W;
                    4'd2: isa_field_width = VU_SOFTMAX_ROWS_W;
                    4'd3: isa_field_width = VU_SOFTMAX_COLS_W;
                    4'd4: isa_field_width = VU_SOFTMAX_DTYPE_W;
                    4'd5: isa_field_width = VU_SOFTMAX_MASK_W;
                    4'd6: isa_field_width = VU_SOFTMAX_LEN_W;
                    4'd7: isa_field_width = VU_SOFTMAX_LSE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_GELU:
                case (slot)
                    4'd0: isa_field_width = VU_GELU_DST_W;
                    4'd1: isa_field_width = VU_GELU_SRC_W;
                    4'd2: isa_field_width = VU_GELU_ROWS_W;
                    4'd3: isa_field_width = VU_GELU_COLS_W;
                    4'd4: isa_field_width = VU_GELU_DTYPE_W;
                    4'd5: isa_field_width = VU_GELU_FORM_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_SILU:
                case (slot)
                    4'd0: isa_field_width = VU_SILU_DST_W;
                    4'd1: isa_field_width = VU_SILU_SRC_W;
                    4'd2: isa_field_width = VU_SILU_ROWS_W;
                    4'd3: isa_field_width = VU_SILU_COLS_W;
                    4'd4: isa_field_width = VU_SILU_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_ROPE:
                case (slot)
                    4'd0: isa_field_width = VU_ROPE_DST_W;
                    4'd1: isa_field_width = VU_ROPE_SRC_W;
                    4'd2: isa_field_width = VU_ROPE_TABLE_W;
                    4'd3: isa_field_width = VU_ROPE_ROWS_W;
                    4'd4: isa_field_width = VU_ROPE_COLS_W;
                    4'd5: isa_field_width = VU_ROPE_HALF_DIM_W;
                    4'd6: isa_field_width = VU_ROPE_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_COPY:
                case (slot)
                    4'd0: isa_field_width = VU_COPY_DST_W;
                    4'd1: isa_field_width = VU_COPY_SRC_W;
                    4'd2: isa_field_width = VU_COPY_ROWS_W;
                    4'd3: isa_field_width = VU_COPY_COLS_W;
                    4'd4: isa_field_width = VU_COPY_SRC_STRIDE_W;
                    4'd5: isa_field_width = VU_COPY_DST_STRIDE_W;
                    4'd6: isa_field_width = VU_COPY_DTYPE_W;
                    4'd7: isa_field_width = VU_COPY_OUT_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_TRANSPOSE:
                case (slot)
                    4'd0: isa_field_width = VU_TRANSPOSE_DST_W;
                    4'd1: isa_field_width = VU_TRANSPOSE_SRC_W;
                    4'd2: isa_field_width = VU_TRANSPOSE_ROWS_W;
                    4'd3: isa_field_width = VU_TRANSPOSE_COLS_W;
                    4'd4: isa_field_width = VU_TRANSPOSE_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_DOT:
                case (slot)
                    4'd0: isa_field_width = VU_DOT_DST_W;
                    4'd1: isa_field_width = VU_DOT_MAT_W;
                    4'd2: isa_field_width = VU_DOT_VEC_W;
                    4'd3: isa_field_width = VU_DOT_ROWS_W;
                    4'd4: isa_field_width = VU_DOT_COLS_W;
                    4'd5: isa_field_width = VU_DOT_TRANS_W;
                    4'd6: isa_field_width = VU_DOT_DTYPE_W;
                    4'd7: isa_field_width = VU_DOT_OUT_DTYPE_W;
                    4'd8: isa_field_width = VU_DOT_ORDER_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_TOPK:
                case (slot)
                    4'd0: isa_field_width = VU_TOPK_DST_W;
                    4'd1: isa_field_width = VU_TOPK_SRC_W;
                    4'd2: isa_field_width = VU_TOPK_ROWS_W;
                    4'd3: isa_field_width = VU_TOPK_COLS_W;
                    4'd4: isa_field_width = VU_TOPK_K_W;
                    4'd5: isa_field_width = VU_TOPK_DTYPE_W;
                    4'd6: isa_field_width = VU_TOPK_OUT_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_VU_AXPY:
                case (slot)
                    4'd0: isa_field_width = VU_AXPY_DST_W;
                    4'd1: isa_field_width = VU_AXPY_X_W;
                    4'd2: isa_field_width = VU_AXPY_SCALE_W;
                    4'd3: isa_field_width = VU_AXPY_ROWS_W;
                    4'd4: isa_field_width = VU_AXPY_COLS_W;
                    4'd5: isa_field_width = VU_AXPY_ACC_W;
                    4'd6: isa_field_width = VU_AXPY_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_PIM_HEADER:
                case (slot)
                    4'd0: isa_field_width = PIM_HEADER_CHANNEL_W;
                    4'd1: isa_field_width = PIM_HEADER_N_GEMVS_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_GWRITE:
                case (slot)
                    4'd0: isa_field_width = GWRITE_CHANNEL_W;
                    4'd1: isa_field_width = GWRITE_SRC_W;
                    4'd2: isa_field_width = GWRITE_LEN_W;
                    4'd3: isa_field_width = GWRITE_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_G_ACT:
                case (slot)
                    4'd0: isa_field_width = G_ACT_CHANNEL_W;
                    4'd1: isa_field_width = G_ACT_ROW_W;
                    4'd2: isa_field_width = G_ACT_BG_MASK_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_COMP:
                case (slot)
                    4'd0: isa_field_width = COMP_CHANNEL_W;
                    4'd1: isa_field_width = COMP_COL_W;
                    4'd2: isa_field_width = COMP_N_COMPS_W;
                    4'd3: isa_field_width = COMP_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_READRES:
                case (slot)
                    4'd0: isa_field_width = READRES_CHANNEL_W;
                    4'd1: isa_field_width = READRES_DST_W;
                    4'd2: isa_field_width = READRES_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_PIM_GEMV:
                case (slot)
                    4'd0: isa_field_width = PIM_GEMV_CHANNEL_W;
                    4'd1: isa_field_width = PIM_GEMV_COL_W;
                    4'd2: isa_field_width = PIM_GEMV_N_COMPS_W;
                    4'd3: isa_field_width = PIM_GEMV_DST_W;
                    4'd4: isa_field_width = PIM_GEMV_DTYPE_W;
                    4'd5: isa_field_width = PIM_GEMV_OUT_DTYPE_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_PIM_PRECHARGE:
                case (slot)
                    4'd0: isa_field_width = PIM_PRECHARGE_CHANNEL_W;
                    4'd1: isa_field_width = PIM_PRECHARGE_BG_MASK_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_ALL_REDUCE:
                case (slot)
                    4'd0: isa_field_width = ALL_REDUCE_BYTES_W;
                    4'd1: isa_field_width = ALL_REDUCE_GROUP_W;
                    4'd2: isa_field_width = ALL_REDUCE_ALGO_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_SEND:
                case (slot)
                    4'd0: isa_field_width = SEND_BYTES_W;
                    4'd1: isa_field_width = SEND_PEER_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_RECV:
                case (slot)
                    4'd0: isa_field_width = RECV_BYTES_W;
                    4'd1: isa_field_width = RECV_PEER_W;
                    default: isa_field_width = 8'd0;
                endcase
            OP_ALL_TO_ALL:
                case (slot)
                    4'd0: isa_field_width = ALL_TO_ALL_BYTES_W;
                    4'd1: isa_field_width = ALL_TO_ALL_GROUP_W;
                    default: isa_field_width = 8'd0;
                endcase
            default: isa_field_width = 8'd0;
        endcase
    end
endfunction

function [1:0] isa_field_kind;
    input [7:0] op;
    input [3:0] slot;
    begin
        isa_field_kind = ISA_KIND_U;
        case (op)
            OP_SIGNAL:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_WAIT:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_DMA_LOAD:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_DMA_STORE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_SA_LOADW:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_SA_MATMUL:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_U;
                    4'd7: isa_field_kind = ISA_KIND_ENUM;
                    4'd8: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_ADD:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_MUL:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_SCALE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    4'd5: isa_field_kind = ISA_KIND_F32;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_LAYERNORM:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    4'd6: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_RMSNORM:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    4'd6: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_SOFTMAX:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    4'd6: isa_field_kind = ISA_KIND_U;
                    4'd7: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_GELU:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_SILU:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_ROPE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_COPY:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    4'd7: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_TRANSPOSE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_DOT:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    4'd7: isa_field_kind = ISA_KIND_ENUM;
                    4'd8: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_TOPK:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_VU_AXPY:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_U;
                    4'd5: isa_field_kind = ISA_KIND_U;
                    4'd6: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_PIM_HEADER:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_GWRITE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_G_ACT:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_COMP:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_READRES:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_PIM_GEMV:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_U;
                    4'd3: isa_field_kind = ISA_KIND_U;
                    4'd4: isa_field_kind = ISA_KIND_ENUM;
                    4'd5: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_PIM_PRECHARGE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_ALL_REDUCE:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    4'd2: isa_field_kind = ISA_KIND_ENUM;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_SEND:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_RECV:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            OP_ALL_TO_ALL:
                case (slot)
                    4'd0: isa_field_kind = ISA_KIND_U;
                    4'd1: isa_field_kind = ISA_KIND_U;
                    default: isa_field_kind = ISA_KIND_U;
                endcase
            default: isa_field_kind = ISA_KIND_U;
        endcase
    end
endfunction

function [35:0] isa_field_min;
    input [7:0] op;
    input [3:0] slot;
    begin
        isa_field_min = 36'd0;
        case (op)
            OP_SIGNAL:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd1;
                    default: isa_field_min = 36'd0;
                endcase
            OP_WAIT:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd1;
                    default: isa_field_min = 36'd0;
                endcase
            OP_DMA_LOAD:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_DMA_STORE:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_SA_LOADW:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_SA_MATMUL:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd1;
                    4'd6: isa_field_min = 36'd0;
                    4'd7: isa_field_min = 36'd0;
                    4'd8: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_ADD:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_MUL:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_SCALE:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_LAYERNORM:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_RMSNORM:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_SOFTMAX:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    4'd7: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_GELU:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_SILU:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_ROPE:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd1;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_COPY:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    4'd7: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_TRANSPOSE:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_DOT:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    4'd7: isa_field_min = 36'd0;
                    4'd8: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_TOPK:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_VU_AXPY:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    4'd3: isa_field_min = 36'd1;
                    4'd4: isa_field_min = 36'd1;
                    4'd5: isa_field_min = 36'd0;
                    4'd6: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_PIM_HEADER:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd1;
                    default: isa_field_min = 36'd0;
                endcase
            OP_GWRITE:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_G_ACT:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_COMP:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_READRES:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_PIM_GEMV:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    4'd2: isa_field_min = 36'd1;
                    4'd3: isa_field_min = 36'd0;
                    4'd4: isa_field_min = 36'd0;
                    4'd5: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_PIM_PRECHARGE:
                case (slot)
                    4'd0: isa_field_min = 36'd0;
                    4'd1: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_ALL_REDUCE:
                case (slot)
                    4'd0: isa_field_min = 36'd1;
                    4'd1: isa_field_min = 36'd1;
                    4'd2: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_SEND:
                case (slot)
                    4'd0: isa_field_min = 36'd1;
                    4'd1: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_RECV:
                case (slot)
                    4'd0: isa_field_min = 36'd1;
                    4'd1: isa_field_min = 36'd0;
                    default: isa_field_min = 36'd0;
                endcase
            OP_ALL_TO_ALL:
                case (slot)
                    4'd0: isa_field_min = 36'd1;
                    4'd1: isa_field_min = 36'd1;
                    default: isa_field_min = 36'd0;
                endcase
            default: isa_field_min = 36'd0;
        endcase
    end
endfunction

function [35:0] isa_field_max;
    input [7:0] op;
    input [3:0] slot;
    begin
        isa_field_max = 36'd0;
        case (op)
            OP_SIGNAL:
                case (slot)
                    4'd0: isa_field_max = 36'd65535;
                    4'd1: isa_field_max = 36'd65535;
                    default: isa_field_max = 36'd0;
                endcase
            OP_WAIT:
                case (slot)
                    4'd0: isa_field_max = 36'd65535;
                    4'd1: isa_field_max = 36'd65535;
                    default: isa_field_max = 36'd0;
                endcase
            OP_DMA_LOAD:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd68719476735;
                    4'd2: isa_field_max = 36'd16383;
                    4'd3: isa_field_max = 36'd16383;
                    4'd4: isa_field_max = 36'd268435455;
                    4'd5: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_DMA_STORE:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd68719476735;
                    4'd2: isa_field_max = 36'd16383;
                    4'd3: isa_field_max = 36'd16383;
                    4'd4: isa_field_max = 36'd268435455;
                    4'd5: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_SA_LOADW:
                case (slot)
                    4'd0: isa_field_max = 36'd63;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd4095;
                    4'd3: isa_field_max = 36'd4095;
                    4'd4: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_SA_MATMUL:
                case (slot)
                    4'd0: isa_field_max = 36'd63;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd4095;
                    4'd5: isa_field_max = 36'd4095;
                    4'd6: isa_field_max = 36'd1;
                    4'd7: isa_field_max = 36'd2;
                    4'd8: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_ADD:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd1;
                    4'd6: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_MUL:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd1;
                    4'd6: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_SCALE:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd2;
                    4'd5: isa_field_max = 36'd4294967295;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_LAYERNORM:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd2;
                    4'd6: isa_field_max = 36'd15;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_RMSNORM:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd2;
                    4'd6: isa_field_max = 36'd15;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_SOFTMAX:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd2;
                    4'd5: isa_field_max = 36'd2;
                    4'd6: isa_field_max = 36'd65535;
                    4'd7: isa_field_max = 36'd1;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_GELU:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd2;
                    4'd5: isa_field_max = 36'd1;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_SILU:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_ROPE:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd255;
                    4'd6: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_COPY:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd65535;
                    4'd6: isa_field_max = 36'd2;
                    4'd7: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_TRANSPOSE:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_DOT:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd1;
                    4'd6: isa_field_max = 36'd2;
                    4'd7: isa_field_max = 36'd2;
                    4'd8: isa_field_max = 36'd1;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_TOPK:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd65535;
                    4'd3: isa_field_max = 36'd4095;
                    4'd4: isa_field_max = 36'd255;
                    4'd5: isa_field_max = 36'd2;
                    4'd6: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_VU_AXPY:
                case (slot)
                    4'd0: isa_field_max = 36'd67108863;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd67108863;
                    4'd3: isa_field_max = 36'd65535;
                    4'd4: isa_field_max = 36'd65535;
                    4'd5: isa_field_max = 36'd1;
                    4'd6: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_PIM_HEADER:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd65535;
                    default: isa_field_max = 36'd0;
                endcase
            OP_GWRITE:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd4095;
                    4'd3: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_G_ACT:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd1048575;
                    4'd2: isa_field_max = 36'd65535;
                    default: isa_field_max = 36'd0;
                endcase
            OP_COMP:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd255;
                    4'd2: isa_field_max = 36'd4095;
                    4'd3: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_READRES:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd67108863;
                    4'd2: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_PIM_GEMV:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd255;
                    4'd2: isa_field_max = 36'd4095;
                    4'd3: isa_field_max = 36'd67108863;
                    4'd4: isa_field_max = 36'd2;
                    4'd5: isa_field_max = 36'd2;
                    default: isa_field_max = 36'd0;
                endcase
            OP_PIM_PRECHARGE:
                case (slot)
                    4'd0: isa_field_max = 36'd1023;
                    4'd1: isa_field_max = 36'd65535;
                    default: isa_field_max = 36'd0;
                endcase
            OP_ALL_REDUCE:
                case (slot)
                    4'd0: isa_field_max = 36'd68719476735;
                    4'd1: isa_field_max = 36'd1023;
                    4'd2: isa_field_max = 36'd0;
                    default: isa_field_max = 36'd0;
                endcase
            OP_SEND:
                case (slot)
                    4'd0: isa_field_max = 36'd68719476735;
                    4'd1: isa_field_max = 36'd1023;
                    default: isa_field_max = 36'd0;
                endcase
            OP_RECV:
                case (slot)
                    4'd0: isa_field_max = 36'd68719476735;
                    4'd1: isa_field_max = 36'd1023;
                    default: isa_field_max = 36'd0;
                endcase
            OP_ALL_TO_ALL:
                case (slot)
                    4'd0: isa_field_max = 36'd68719476735;
                    4'd1: isa_field_max = 36'd1023;
                    default: isa_field_max = 36'd0;
                endcase
            default: isa_field_max = 36'd0;
        endcase
    end
endfunction
