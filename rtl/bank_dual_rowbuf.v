// bank_dual_rowbuf.v -- one DRAM bank's command acceptance: a memory row buffer and a PIM row
// buffer (DUAL=1, NeuPIMs) or one row buffer shared by both (DUAL=0, blocked mode), with the
// timing counters of the HBM2 + PIM constraint table (archsim/memory/spec.py).
//
// Interface
//   clk, rst_n     clock (rising edge, one tCK), active-low synchronous reset
//   cmd            command offered this cycle: 0 NOP, 1 ACT, 2 RD, 3 WR, 4 PRE,
//                  5 PIM_ACT (G_ACT), 6 COMP, 7 PIM_PRE (PIM_PRECHARGE)
//   row            row of ACT / PIM_ACT; for RD / WR the row the request targets (it must be
//                  the open memory row)
//   can_issue[c]   command c (with this cycle's row) meets every state and timing rule now;
//                  bit 0 (NOP) is always 0
//   accept         can_issue[cmd]: the offered command issues at the end of this cycle;
//                  a rejected command is dropped (the controller offers it again later)
//   mem_open, mem_row   memory row buffer state; pim_open, pim_row   PIM row buffer state
// Timing (cycles of tCK, parameters from archsim.config / archsim.memory.spec)
//   A command q may issue at cycle t only if t >= t_p + L(p, q) for every earlier command p,
//   L from the table restricted to what one bank in isolation sees (all hierarchy levels):
//     ACT->RD tRCDRD, ACT->WR tRCDWR, ACT->PRE tRAS, ACT->ACT max(tRC, tRRD_S, tRRD_L),
//     ACT<->PIM_ACT max(tRRD_S, tRRD_L) (DUAL=0: also tRC), PRE->ACT tRP (DUAL=0: also
//     PRE->PIM_ACT and PIM_PRE->ACT), RD->RD and WR->WR max(tCCD_S, tCCD_L, BL),
//     RD->WR CL+BL-CWL, WR->RD CWL+BL+max(tWTR_S, tWTR_L), RD->PRE max(tRTP_S, tRTP_L),
//     WR->PRE CWL+BL+tWR, PIM_ACT->COMP tRCDRD, PIM_ACT->PIM_PRE tRAS,
//     PIM_ACT->PIM_ACT max(tRC, tRRD_S, tRRD_L), COMP->COMP max(BL, tCCD_S),
//     COMP->PIM_PRE tRTP_L, PIM_PRE->PIM_ACT tRP; one command per cycle.
//   tFAW: the activations (ACT weight ACT_WEIGHT, PIM_ACT weight GACT_WEIGHT, each capped at
//   FAW_ACTS) issued in the last T_FAW cycles plus the new one weigh at most FAW_ACTS.
//   State rules: ACT needs the memory row closed (DUAL=0: both closed); RD/WR need it open and
//   equal to row; PIM_ACT needs the PIM row closed (DUAL=0: both closed); COMP needs the PIM
//   row open; PRE / PIM_PRE on a closed row are legal no-ops (their timing still counts).
//   can_issue/accept are combinational; state and counters update at the rising edge.
// Number format: unsigned counters of CNT_W bits (saturating at 0).
`timescale 1ns/1ps
module bank_dual_rowbuf #(
    parameter integer DUAL        = 1,
    parameter integer ROW_W       = 15,
    parameter integer CNT_W       = 12,
    parameter integer T_RCDRD     = 14,
    parameter integer T_RCDWR     = 14,
    parameter integer T_RAS       = 34,
    parameter integer T_RC        = 48,
    parameter integer T_RP        = 14,
    parameter integer T_RRD_S     = 4,
    parameter integer T_RRD_L     = 6,
    parameter integer T_CCD_S     = 1,
    parameter integer T_CCD_L     = 2,
    parameter integer T_WTR_S     = 6,
    parameter integer T_WTR_L     = 8,
    parameter integer T_RTP_S     = 4,
    parameter integer T_RTP_L     = 6,
    parameter integer T_WR        = 16,
    parameter integer CL          = 14,
    parameter integer CWL         = 4,
    parameter integer BL          = 2,
    parameter integer T_FAW       = 30,
    parameter integer FAW_ACTS    = 4,
    parameter integer ACT_WEIGHT  = 1,
    parameter integer GACT_WEIGHT = 4
) (
    input  wire             clk,
    input  wire             rst_n,
    input  wire [2:0]       cmd,
    input  wire [ROW_W-1:0] row,
    output wire [7:0]       can_issue,
    output wire             accept,
    output reg              mem_open,
    output reg  [ROW_W-1:0] mem_row,
    output reg              pim_open,
    output reg  [ROW_W-1:0] pim_row
);
    localparam [2:0] CMD_NOP = 3'd0, CMD_ACT = 3'd1, CMD_RD = 3'd2, CMD_WR = 3'd3,
                     CMD_PRE = 3'd4, CMD_PIM_ACT = 3'd5, CMD_COMP = 3'd6, CMD_PIM_PRE = 3'd7;

    function integer max2;
        input signed [31:0] a;
        input signed [31:0] b;
        max2 = (a > b) ? a : b;
    endfunction

    // ---------------------------------------------------------------- L(p, q), >= 1
    localparam integer T_RRD   = max2(T_RRD_S, T_RRD_L);
    localparam integer L_ACT_ACT    = max2(1, max2(T_RC, T_RRD));
    localparam integer L_ACT_GACT   = max2(1, DUAL ? T_RRD : max2(T_RC, T_RRD));
    localparam integer L_ACT_RD     = max2(1, T_RCDRD);
    localparam integer L_ACT_WR     = max2(1, T_RCDWR);
    localparam integer L_ACT_PRE    = max2(1, T_RAS);
    localparam integer L_RD_RD      = max2(1, max2(BL, max2(T_CCD_S, T_CCD_L)));
    localparam integer L_RD_WR      = max2(1, CL + BL - CWL);
    localparam integer L_RD_PRE     = max2(1, max2(T_RTP_S, T_RTP_L));
    localparam integer L_WR_WR      = max2(1, max2(BL, max2(T_CCD_S, T_CCD_L)));
    localparam integer L_WR_RD      = max2(1, CWL + BL + max2(T_WTR_S, T_WTR_L));
    localparam integer L_WR_PRE     = max2(1, CWL + BL + T_WR);
    localparam integer L_PRE_ACT    = max2(1, T_RP);
    localparam integer L_PRE_GACT   = DUAL ? 1 : max2(1, T_RP);
    localparam integer L_GACT_GACT  = max2(1, max2(T_RC, T_RRD));
    localparam integer L_GACT_ACT   = L_ACT_GACT;
    localparam integer L_GACT_COMP  = max2(1, T_RCDRD);
    localparam integer L_GACT_PPRE  = max2(1, T_RAS);
    localparam integer L_COMP_COMP  = max2(1, max2(BL, T_CCD_S));
    localparam integer L_COMP_PPRE  = max2(1, T_RTP_L);
    localparam integer L_PPRE_GACT  = max2(1, T_RP);
    localparam integer L_PPRE_ACT   = DUAL ? 1 : max2(1, T_RP);
    localparam integer W_ACT  = (ACT_WEIGHT  < FAW_ACTS) ? ACT_WEIGHT  : FAW_ACTS;
    localparam integer W_GACT = (GACT_WEIGHT < FAW_ACTS) ? GACT_WEIGHT : FAW_ACTS;
    localparam integer WSUM_W = 8;

    // ---------------------------------------------------------------- per-command wait counters
    // wait_x = cycles until x meets every pairwise rule (0: allowed now).
    reg [CNT_W-1:0] wait_act, wait_rd, wait_wr, wait_pre, wait_gact, wait_comp, wait_ppre;

    // ---------------------------------------------------------------- tFAW window
    // FAW_ACTS slots of recent activations, newest in slot 0: weight and age (t - t_issue),
    // slot s in bits [s*WSUM_W +: WSUM_W] / [s*CNT_W +: CNT_W].
    reg [FAW_ACTS*WSUM_W-1:0] faw_w;
    reg [FAW_ACTS*CNT_W-1:0]  faw_age;
    reg [WSUM_W-1:0] faw_sum;
    integer s, r;   // loop indices: s in the combinational block, r in the clocked one
    always @* begin
        faw_sum = {WSUM_W{1'b0}};
        for (s = 0; s < FAW_ACTS; s = s + 1)
            if (faw_age[s*CNT_W +: CNT_W] < T_FAW) faw_sum = faw_sum + faw_w[s*WSUM_W +: WSUM_W];
    end
    wire faw_ok_act  = (faw_sum + W_ACT)  <= FAW_ACTS;
    wire faw_ok_gact = (faw_sum + W_GACT) <= FAW_ACTS;

    // ---------------------------------------------------------------- acceptance
    wire shared_closed = !mem_open && !pim_open;
    wire ok_act  = (wait_act == 0) && faw_ok_act && (DUAL ? !mem_open : shared_closed);
    wire ok_rd   = (wait_rd == 0) && mem_open && (row == mem_row);
    wire ok_wr   = (wait_wr == 0) && mem_open && (row == mem_row);
    wire ok_pre  = (wait_pre == 0);
    wire ok_gact = (wait_gact == 0) && faw_ok_gact && (DUAL ? !pim_open : shared_closed);
    wire ok_comp = (wait_comp == 0) && pim_open;
    wire ok_ppre = (wait_ppre == 0);
    assign can_issue = {ok_ppre, ok_comp, ok_gact, ok_pre, ok_wr, ok_rd, ok_act, 1'b0};
    assign accept = can_issue[cmd];

    wire is_act  = accept && (cmd == CMD_ACT);
    wire is_rd   = accept && (cmd == CMD_RD);
    wire is_wr   = accept && (cmd == CMD_WR);
    wire is_pre  = accept && (cmd == CMD_PRE);
    wire is_gact = accept && (cmd == CMD_PIM_ACT);
    wire is_comp = accept && (cmd == CMD_COMP);
    wire is_ppre = accept && (cmd == CMD_PIM_PRE);

    // next value of a wait counter: max(wait - 1, lat - 1) over the rules the issued
    // command starts (lat 0: no rule)
    function [CNT_W-1:0] next_wait;
        input [CNT_W-1:0] cur;
        input [CNT_W-1:0] lat;
        reg [CNT_W-1:0] dec;
        begin
            dec = (cur == 0) ? {CNT_W{1'b0}} : cur - 1'b1;
            next_wait = (lat != 0 && lat - 1'b1 > dec) ? lat - 1'b1 : dec;
        end
    endfunction

    // one cycle older, saturating at T_FAW (out of the window)
    function [CNT_W-1:0] aged;
        input [CNT_W-1:0] age;
        aged = (age < T_FAW) ? age + 1'b1 : age;
    endfunction

    // latency from the command issued this cycle to each following command (0: none)
    wire [CNT_W-1:0] lat_to_act  = is_act ? L_ACT_ACT : is_pre ? L_PRE_ACT : is_gact ? L_GACT_ACT :
                                    is_ppre ? L_PPRE_ACT : 0;
    wire [CNT_W-1:0] lat_to_rd   = is_act ? L_ACT_RD : is_rd ? L_RD_RD : is_wr ? L_WR_RD : 0;
    wire [CNT_W-1:0] lat_to_wr   = is_act ? L_ACT_WR : is_rd ? L_RD_WR : is_wr ? L_WR_WR : 0;
    wire [CNT_W-1:0] lat_to_pre  = is_act ? L_ACT_PRE : is_rd ? L_RD_PRE : is_wr ? L_WR_PRE : 0;
    wire [CNT_W-1:0] lat_to_gact = is_gact ? L_GACT_GACT : is_act ? L_ACT_GACT :
                               is_pre ? L_PRE_GACT : is_ppre ? L_PPRE_GACT : 0;
    wire [CNT_W-1:0] lat_to_comp = is_gact ? L_GACT_COMP : is_comp ? L_COMP_COMP : 0;
    wire [CNT_W-1:0] lat_to_ppre = is_gact ? L_GACT_PPRE : is_comp ? L_COMP_PPRE : 0;

    always @(posedge clk) begin
        if (!rst_n) begin
            wait_act <= 0; wait_rd <= 0; wait_wr <= 0; wait_pre <= 0;
            wait_gact <= 0; wait_comp <= 0; wait_ppre <= 0;
            mem_open <= 1'b0; mem_row <= {ROW_W{1'b0}};
            pim_open <= 1'b0; pim_row <= {ROW_W{1'b0}};
            faw_w   <= {FAW_ACTS*WSUM_W{1'b0}};
            for (r = 0; r < FAW_ACTS; r = r + 1) faw_age[r*CNT_W +: CNT_W] <= T_FAW;
        end else begin
            wait_act  <= next_wait(wait_act,  lat_to_act);
            wait_rd   <= next_wait(wait_rd,   lat_to_rd);
            wait_wr   <= next_wait(wait_wr,   lat_to_wr);
            wait_pre  <= next_wait(wait_pre,  lat_to_pre);
            wait_gact <= next_wait(wait_gact, lat_to_gact);
            wait_comp <= next_wait(wait_comp, lat_to_comp);
            wait_ppre <= next_wait(wait_ppre, lat_to_ppre);
            // row buffers
            if (is_act)  begin mem_open <= 1'b1; mem_row <= row; end
            if (is_pre)  mem_open <= 1'b0;
            if (is_gact) begin pim_open <= 1'b1; pim_row <= row; end
            if (is_ppre) pim_open <= 1'b0;
            // activation window: age every slot, push the new activation into slot 0
            for (r = FAW_ACTS - 1; r >= 0; r = r - 1) begin
                if (is_act || is_gact) begin
                    if (r == 0) begin
                        faw_w[0 +: WSUM_W]  <= is_act ? W_ACT : W_GACT;
                        faw_age[0 +: CNT_W] <= 1;
                    end else begin
                        faw_w[r*WSUM_W +: WSUM_W] <= faw_w[(r-1)*WSUM_W +: WSUM_W];
                        faw_age[r*CNT_W +: CNT_W] <= aged(faw_age[(r-1)*CNT_W +: CNT_W]);
                    end
                end else begin
                    faw_age[r*CNT_W +: CNT_W] <= aged(faw_age[r*CNT_W +: CNT_W]);
                end
            end
        end
    end
endmodule
