// pim_channel.v -- command acceptance of one HBM + PIM channel: every bank (RANKS x BGS x
// BANKS_PER_BG) with its memory row buffer and its PIM row buffer (DUAL=1, NeuPIMs) or one row
// buffer shared by both (DUAL=0, blocked mode with PIM_ENTER/PIM_EXIT), the rank, bank-group
// and channel timing of the HBM2/HBM3 + PIM constraint table (archsim/memory/spec.py), and the
// command-bus rule that a PIM command wins the bus over a memory command.
//
// Interface
//   clk, rst_n        clock (rising edge, one tCK), active-low synchronous reset
//   m_* / p_*         two request ports sharing the channel's one command bus: m (memory side:
//                     ACT PRE RD WR RDA WRA REF REFpb) and p (PIM side: PIM_HEADER GWRITE G_ACT
//                     COMP READRES PIM_GEMV PIM_PRE PIM_ENTER PIM_EXIT); either port may carry
//                     any command. *_valid offers *_cmd this cycle; *_cmd is the command's
//                     index in archsim.memory.spec.COMMANDS (parameters C_*); *_rank, *_bg,
//                     *_bank address the target (a bank command uses all three, G_ACT rank and
//                     bank group, REF the rank, channel-wide commands none); *_row is the row
//                     of ACT / G_ACT and the row a RD/WR/RDA/WRA targets (it must be the open
//                     row); *_k is the COMP count of a PIM_GEMV. A code >= NCMD is never
//                     granted; a target outside the organisation allows no command that
//                     names a rank, bank group or bank.
//   m_can, p_can      bit c: command c addressed to that port's target (and row) meets every
//                     state and timing rule now; independent of *_valid and of the other port
//   p_grant           p_valid && p_can[p_cmd]: the PIM port's command issues this cycle
//   m_grant           m_valid && m_can[m_cmd] && !p_grant: the memory port's command issues
//                     unless the PIM port takes the bus (PIM priority, NeuPIMs section 4)
//   mem_open, pim_open  per bank (flat index (rank*BGS + bg)*BANKS_PER_BG + bank): memory /
//                     PIM row open; m_mem_row, m_pim_row  the rows of m's target bank
//   pim_mode          DUAL=0: the channel is in PIM mode (between PIM_ENTER and PIM_EXIT)
//   gemv_busy         a PIM_GEMV is still executing (CSTEP x (max(k, FILL) + 1) cycles)
//   cycle             cycles since reset (the time base of every timing stamp)
// Timing (cycles of tCK; primitive values from archsim.memory.spec.latency_names, tFAW from
// archsim.memory.spec.compile_table; the latencies below are composed here from them)
//   A command q may issue at cycle t only if t >= t_p + L(level, p, q) for every earlier
//   command p that covers a node of `level` that q covers. Levels: channel, rank, bank group,
//   bank. A bank command, REFpb: its bank and the bank group and rank above it; G_ACT: the
//   banks of its bank group; REF: every bank of its rank; PIM_HEADER, GWRITE, COMP, READRES,
//   PIM_GEMV, PIM_PRE, PIM_ENTER, PIM_EXIT: every node of the channel. L is the maximum over
//   the rules of the table that relate p to q at that level (functions lat_channel, lat_rank,
//   lat_bankgroup, lat_bank; HBM3=1 selects the JESD238 rows tRTW and tPPD, DUAL=0 adds the
//   shared-row-buffer rows and the mode-switch rows). PIM_GEMV's occupancy depends on its k.
//   tFAW: per rank, the activations (ACT weight ACT_WEIGHT, G_ACT weight GACT_WEIGHT, each
//   capped at FAW_ACTS) of the last T_FAW cycles plus the new one weigh at most FAW_ACTS.
//   Timers are kept as ready-at stamps against the free-running `cycle` counter: stamp(node,
//   q) = max over the issued p of t_p + L, and q is allowed when cycle >= the largest stamp of
//   the nodes it covers (per-group maxima are kept beside the per-node stamps, so a broadcast
//   command needs no search). A stamp is a count-down timer read as (stamp - cycle); the
//   stamp form costs an event-driven simulator nothing on idle cycles.
//   State rules (archsim.memory.spec.STATE_RULES): ACT needs its memory row closed (DUAL=0:
//   both rows); RD/WR/RDA/WRA need it open and equal to *_row; RDA/WRA close it (auto
//   precharge); G_ACT needs the PIM rows of its bank group closed (DUAL=0: both rows);
//   COMP/PIM_GEMV need a PIM row open in the channel; REF/REFpb need every bank they refresh
//   closed (both rows), and REF_PER_BANK selects which of the two the refresh policy issues;
//   DUAL=0: memory commands only outside PIM mode, PIM commands only inside it, PIM_ENTER only
//   outside it with every memory row closed, PIM_EXIT only inside it; DUAL=1: no mode
//   switches. PRE / PIM_PRE of a closed row are legal no-ops (their timing still counts).
//   can/grant are combinational; state and stamps update at the rising edge.
// Number format: unsigned stamps and cycle counter of TS_W bits (the cycle count must stay
// below 2^TS_W minus the longest latency: the test bench checks it); latencies are clamped to
// >= 0 (a negative table latency is no constraint).
`timescale 1ns/1ps
module pim_channel #(
    parameter integer RANKS        = 2,
    parameter integer BGS          = 4,
    parameter integer BANKS_PER_BG = 4,
    parameter integer RANK_W       = 1,
    parameter integer BG_W         = 2,
    parameter integer BK_W         = 2,
    parameter integer DUAL         = 1,
    parameter integer HBM3         = 0,
    parameter integer REF_PER_BANK = 0,
    parameter integer ROW_W        = 15,
    parameter integer K_W          = 6,
    parameter integer TS_W         = 32,
    parameter integer NCMD         = 17,
    parameter integer CMD_W        = 5,
    // command codes: indices into archsim.memory.spec.COMMANDS
    parameter integer C_ACT = 0, parameter integer C_PRE = 1, parameter integer C_RD = 2,
    parameter integer C_WR = 3, parameter integer C_RDA = 4, parameter integer C_WRA = 5,
    parameter integer C_REF = 6, parameter integer C_REFPB = 7,
    parameter integer C_HEADER = 8, parameter integer C_GWRITE = 9,
    parameter integer C_GACT = 10, parameter integer C_COMP = 11,
    parameter integer C_READRES = 12, parameter integer C_GEMV = 13,
    parameter integer C_PPRE = 14, parameter integer C_ENTER = 15, parameter integer C_EXIT = 16,
    // primitive timings (cycles of tCK)
    parameter integer T_RCDRD = 14, parameter integer T_RCDWR = 14,
    parameter integer T_RAS = 34, parameter integer T_RC = 48, parameter integer T_RP = 14,
    parameter integer T_RRD_S = 4, parameter integer T_RRD_L = 6,
    parameter integer T_CCD_S = 1, parameter integer T_CCD_L = 2,
    parameter integer T_WTR_S = 6, parameter integer T_WTR_L = 8,
    parameter integer T_RTP_L = 6, parameter integer T_WR = 16,
    parameter integer CL = 14, parameter integer CWL = 4, parameter integer BL = 2,
    parameter integer T_RFC = 260, parameter integer T_RFCPB = 160,
    parameter integer T_RREFD = 8, parameter integer T_RTW = 0, parameter integer T_PPD = 0,
    parameter integer GWRITE = 96, parameter integer READRES = 4,
    parameter integer FILL = 6, parameter integer SWITCH = 28,
    // activation window
    parameter integer T_FAW = 30, parameter integer FAW_ACTS = 4,
    parameter integer ACT_WEIGHT = 1, parameter integer GACT_WEIGHT = 4
) (
    input  wire                                 clk,
    input  wire                                 rst_n,
    input  wire                                 m_valid,
    input  wire [CMD_W-1:0]                     m_cmd,
    input  wire [RANK_W-1:0]                    m_rank,
    input  wire [BG_W-1:0]                      m_bg,
    input  wire [BK_W-1:0]                      m_bank,
    input  wire [ROW_W-1:0]                     m_row,
    input  wire [K_W-1:0]                       m_k,
    input  wire                                 p_valid,
    input  wire [CMD_W-1:0]                     p_cmd,
    input  wire [RANK_W-1:0]                    p_rank,
    input  wire [BG_W-1:0]                      p_bg,
    input  wire [BK_W-1:0]                      p_bank,
    input  wire [ROW_W-1:0]                     p_row,
    input  wire [K_W-1:0]                       p_k,
    output wire [NCMD-1:0]                      m_can,
    output wire [NCMD-1:0]                      p_can,
    output wire                                 m_grant,
    output wire                                 p_grant,
    output wire [RANKS*BGS*BANKS_PER_BG-1:0]    mem_open,
    output wire [RANKS*BGS*BANKS_PER_BG-1:0]    pim_open,
    output wire [ROW_W-1:0]                     m_mem_row,
    output wire [ROW_W-1:0]                     m_pim_row,
    output reg                                  pim_mode,
    output wire                                 gemv_busy,
    output wire [TS_W-1:0]                      cycle
);
    localparam integer NBG = RANKS * BGS;             // bank groups of the channel
    localparam integer NB  = NBG * BANKS_PER_BG;      // banks of the channel
    localparam integer BPR = BGS * BANKS_PER_BG;      // banks per rank
    localparam integer LV_CH = 0, LV_RANK = 1, LV_BG = 2, LV_BANK = 3;
    localparam integer NPAIR = NCMD * NCMD;
    localparam integer CSTEP = (BL > T_CCD_S) ? BL : T_CCD_S;
    localparam integer W_ACT  = (ACT_WEIGHT  < FAW_ACTS) ? ACT_WEIGHT  : FAW_ACTS;
    localparam integer W_GACT = (GACT_WEIGHT < FAW_ACTS) ? GACT_WEIGHT : FAW_ACTS;
    localparam integer WSUM_W = 8;

    function integer max2;
        input signed [31:0] a;
        input signed [31:0] b;
        max2 = (a > b) ? a : b;
    endfunction

    // ---------------------------------------------------------------- command classes
    function is_rds;  input [31:0] c; is_rds = (c == C_RD) || (c == C_RDA); endfunction
    function is_wrs;  input [31:0] c; is_wrs = (c == C_WR) || (c == C_WRA); endfunction
    function is_acts; input [31:0] c; is_acts = (c == C_ACT) || (c == C_GACT); endfunction
    function is_pres; input [31:0] c; is_pres = (c == C_PRE) || (c == C_PPRE); endfunction
    function is_refs; input [31:0] c; is_refs = (c == C_REF) || (c == C_REFPB); endfunction
    function is_mem_any;   // ACT PRE RD WR RDA WRA
        input [31:0] c;
        is_mem_any = (c == C_ACT) || (c == C_PRE) || is_rds(c) || is_wrs(c);
    endfunction
    function is_pim_any;   // the PIM commands of the table (PIM_ANY)
        input [31:0] c;
        is_pim_any = (c == C_HEADER) || (c == C_GWRITE) || (c == C_GACT) || (c == C_COMP)
                     || (c == C_READRES) || (c == C_GEMV) || (c == C_PPRE);
    endfunction
    // the followers whose issue waits for a running PIM_GEMV (rule GEMV_BUSY)
    function gemv_follower;
        input [31:0] c;
        gemv_follower = (c == C_COMP) || (c == C_READRES) || (c == C_GEMV)
                        || (c == C_GWRITE) || (c == C_PPRE) || (c == C_GACT);
    endfunction

    // ---------------------------------------------------------------- L(level, p, q)
    // channel: command bus, data bus, global buffer, PIM occupancy, mode switches
    function integer lat_channel;
        input [31:0] p;
        input [31:0] q;
        reg signed [31:0] l;
        begin
            l = 1;                                                      // CMD_BUS
            if (is_rds(p) && (is_rds(q) || q == C_READRES)) l = max2(l, max2(T_CCD_S, BL));
            if (is_wrs(p) && (is_wrs(q) || q == C_GWRITE))  l = max2(l, max2(T_CCD_S, BL));
            if (is_rds(p) && (is_wrs(q) || q == C_GWRITE))
                l = max2(l, HBM3 ? T_RTW : CL + BL - CWL);              // tRTW
            if (is_wrs(p) && is_rds(q)) l = max2(l, CWL + BL - CL);     // tWR_RD_BUS
            if (is_wrs(p) && q == C_READRES) l = max2(l, CWL + BL + T_WTR_S);
            if (p == C_GWRITE && (is_wrs(q) || q == C_GWRITE)) l = max2(l, GWRITE);
            if (p == C_GWRITE && (is_rds(q) || q == C_READRES))
                l = max2(l, CWL + GWRITE + T_WTR_S);
            if (p == C_GWRITE && (q == C_COMP || q == C_GEMV)) l = max2(l, CWL + GWRITE);
            if (p == C_READRES && (is_rds(q) || q == C_READRES)) l = max2(l, READRES);
            if (p == C_READRES && (is_wrs(q) || q == C_GWRITE)) l = max2(l, CL + READRES - CWL);
            if (p == C_COMP && (q == C_COMP || q == C_READRES || q == C_GEMV || q == C_GWRITE))
                l = max2(l, CSTEP);                                     // COMP_STEP
            // GEMV_BUSY depends on k: added at issue (gemv_lat)
            if (!DUAL && p == C_ENTER && is_pim_any(q)) l = max2(l, SWITCH);
            if (!DUAL && p == C_EXIT && (is_mem_any(q) || is_refs(q))) l = max2(l, SWITCH);
            lat_channel = l;
        end
    endfunction

    // rank: activation power, refresh, write-to-read within a die
    function integer lat_rank;
        input [31:0] p;
        input [31:0] q;
        reg signed [31:0] l;
        begin
            l = 0;
            if (is_wrs(p) && is_rds(q)) l = max2(l, CWL + BL + T_WTR_S);      // tWTR_S
            if (is_acts(p) && is_acts(q)) l = max2(l, T_RRD_S);
            if (HBM3 && is_pres(p) && is_pres(q)) l = max2(l, T_PPD);
            if (p == C_REF && (is_acts(q) || q == C_REF || q == C_ENTER || q == C_EXIT))
                l = max2(l, T_RFC);
            if (is_pres(p) && q == C_REF) l = max2(l, T_RP);
            if (is_acts(p) && q == C_REF) l = max2(l, T_RC);
            if (p == C_RDA && q == C_REF) l = max2(l, T_RTP_L + T_RP);
            if (p == C_WRA && q == C_REF) l = max2(l, CWL + BL + T_WR + T_RP);
            if (p == C_REFPB && (is_acts(q) || q == C_REFPB)) l = max2(l, T_RREFD);
            if (is_acts(p) && q == C_REFPB) l = max2(l, T_RRD_S);
            lat_rank = l;
        end
    endfunction

    function integer lat_bankgroup;
        input [31:0] p;
        input [31:0] q;
        reg signed [31:0] l;
        begin
            l = 0;
            if (is_acts(p) && is_acts(q)) l = max2(l, T_RRD_L);
            if (is_rds(p) && is_rds(q)) l = max2(l, max2(T_CCD_L, BL));
            if (is_wrs(p) && is_wrs(q)) l = max2(l, max2(T_CCD_L, BL));
            if (is_wrs(p) && is_rds(q)) l = max2(l, CWL + BL + T_WTR_L);
            lat_bankgroup = l;
        end
    endfunction

    // bank: the memory row buffer, per-bank refresh, the PIM row buffer, the shared buffer
    function integer lat_bank;
        input [31:0] p;
        input [31:0] q;
        reg signed [31:0] l;
        begin
            l = 0;
            if (p == C_ACT && is_rds(q)) l = max2(l, T_RCDRD);
            if (p == C_ACT && is_wrs(q)) l = max2(l, T_RCDWR);
            if (p == C_ACT && q == C_PRE) l = max2(l, T_RAS);
            if (p == C_ACT && q == C_ACT) l = max2(l, T_RC);
            if (p == C_PRE && (q == C_ACT || q == C_ENTER)) l = max2(l, T_RP);
            if (p == C_WR && q == C_PRE) l = max2(l, CWL + BL + T_WR);
            if (p == C_RD && q == C_PRE) l = max2(l, T_RTP_L);
            if (p == C_RDA && (q == C_ACT || q == C_ENTER)) l = max2(l, T_RTP_L + T_RP);
            if (p == C_WRA && (q == C_ACT || q == C_ENTER)) l = max2(l, CWL + BL + T_WR + T_RP);
            if (p == C_REFPB && (is_acts(q) || q == C_REFPB || q == C_ENTER || q == C_EXIT))
                l = max2(l, T_RFCPB);
            if (is_acts(p) && q == C_REFPB) l = max2(l, T_RC);
            if (is_pres(p) && q == C_REFPB) l = max2(l, T_RP);
            if (p == C_RDA && q == C_REFPB) l = max2(l, T_RTP_L + T_RP);
            if (p == C_WRA && q == C_REFPB) l = max2(l, CWL + BL + T_WR + T_RP);
            if (p == C_GACT && (q == C_COMP || q == C_GEMV || q == C_READRES))
                l = max2(l, T_RCDRD);
            if (p == C_GACT && q == C_PPRE) l = max2(l, T_RAS);
            if (p == C_GACT && q == C_GACT) l = max2(l, T_RC);
            if (p == C_PPRE && (q == C_GACT || q == C_EXIT)) l = max2(l, T_RP);
            if (p == C_COMP && q == C_PPRE) l = max2(l, T_RTP_L);
            if (!DUAL) begin                 // one row buffer shared by memory and PIM
                if (is_acts(p) && is_acts(q)) l = max2(l, T_RC);
                if (is_pres(p) && is_acts(q)) l = max2(l, T_RP);
                if (p == C_RDA && q == C_GACT) l = max2(l, T_RTP_L + T_RP);
                if (p == C_WRA && q == C_GACT) l = max2(l, CWL + BL + T_WR + T_RP);
            end
            lat_bank = l;
        end
    endfunction

    // the k-independent latencies as a table (level, p, q), filled once
    reg [15:0] lat_rom [0:4*NPAIR-1];
    integer ip, iq;
    initial begin
        for (ip = 0; ip < NCMD; ip = ip + 1)
            for (iq = 0; iq < NCMD; iq = iq + 1) begin
                lat_rom[LV_CH * NPAIR + ip * NCMD + iq]   = max2(0, lat_channel(ip, iq));
                lat_rom[LV_RANK * NPAIR + ip * NCMD + iq] = max2(0, lat_rank(ip, iq));
                lat_rom[LV_BG * NPAIR + ip * NCMD + iq]   = max2(0, lat_bankgroup(ip, iq));
                lat_rom[LV_BANK * NPAIR + ip * NCMD + iq] = max2(0, lat_bank(ip, iq));
            end
    end

    // ---------------------------------------------------------------- state
    reg [TS_W-1:0] now;
    reg [NB-1:0]   mem_open_r, pim_open_r;
    reg [ROW_W-1:0] mem_row_r [0:NB-1];
    reg [ROW_W-1:0] pim_row_r [0:NB-1];
    reg [TS_W-1:0] gemv_end;
    // ready-at stamps: node-major, NCMD followers per node
    reg [TS_W-1:0] ch_t       [0:NCMD-1];
    reg [TS_W-1:0] rank_t     [0:RANKS*NCMD-1];
    reg [TS_W-1:0] bg_t       [0:NBG*NCMD-1];
    reg [TS_W-1:0] bank_t     [0:NB*NCMD-1];
    // per-group maxima of the stamps below a node (what a broadcast command waits for)
    reg [TS_W-1:0] rank_all   [0:NCMD-1];          // max over ranks
    reg [TS_W-1:0] bg_of_rank [0:RANKS*NCMD-1];    // max over the bank groups of a rank
    reg [TS_W-1:0] bg_all     [0:NCMD-1];
    reg [TS_W-1:0] bk_of_bg   [0:NBG*NCMD-1];      // max over the banks of a bank group
    reg [TS_W-1:0] bk_of_rank [0:RANKS*NCMD-1];
    reg [TS_W-1:0] bk_all     [0:NCMD-1];
    // activation window: FAW_ACTS most recent activations per rank (slot 0 newest)
    reg [TS_W-1:0]   faw_t [0:RANKS*FAW_ACTS-1];
    reg [WSUM_W-1:0] faw_w [0:RANKS*FAW_ACTS-1];

    assign cycle     = now;
    assign mem_open  = mem_open_r;
    assign pim_open  = pim_open_r;
    assign gemv_busy = now < gemv_end;

    // ---------------------------------------------------------------- target decode
    wire [31:0] m_r  = m_rank;
    wire [31:0] m_rg = m_rank * BGS + m_bg;
    wire [31:0] m_b  = (m_rank * BGS + m_bg) * BANKS_PER_BG + m_bank;
    wire [31:0] p_r  = p_rank;
    wire [31:0] p_rg = p_rank * BGS + p_bg;
    wire [31:0] p_b  = (p_rank * BGS + p_bg) * BANKS_PER_BG + p_bank;
    // a target outside the channel (rank, bank group or bank beyond the organisation) allows
    // no command addressed to a bank, bank group or rank
    wire m_addr_ok = (m_rank < RANKS) && (m_bg < BGS) && (m_bank < BANKS_PER_BG);
    wire p_addr_ok = (p_rank < RANKS) && (p_bg < BGS) && (p_bank < BANKS_PER_BG);
    assign m_mem_row = mem_row_r[m_b];
    assign m_pim_row = pim_row_r[m_b];

    // ---------------------------------------------------------------- state rules per port
    // open rows of a bank group / rank of each port's target, and of the whole channel
    wire [NB-1:0] any_open = mem_open_r | pim_open_r;
    wire m_bg_pim_open = |((pim_open_r >> (m_rg * BANKS_PER_BG)) & {BANKS_PER_BG{1'b1}});
    wire m_bg_mem_open = |((mem_open_r >> (m_rg * BANKS_PER_BG)) & {BANKS_PER_BG{1'b1}});
    wire p_bg_pim_open = |((pim_open_r >> (p_rg * BANKS_PER_BG)) & {BANKS_PER_BG{1'b1}});
    wire p_bg_mem_open = |((mem_open_r >> (p_rg * BANKS_PER_BG)) & {BANKS_PER_BG{1'b1}});
    wire m_rank_open = |((any_open >> (m_r * BPR)) & {BPR{1'b1}});
    wire p_rank_open = |((any_open >> (p_r * BPR)) & {BPR{1'b1}});
    wire chan_pim_open = |pim_open_r;
    wire chan_mem_open = |mem_open_r;

    // state_ok reads nothing but its arguments (a continuous assignment is sensitive to the
    // operands it names, not to what a function reads by itself)
    function state_ok;
        input [31:0] q;
        input         b_mem_open;   // target bank's rows
        input         b_pim_open;
        input         row_hit;      // *_row equals the target bank's open memory row
        input         bg_pim_open;  // a PIM / memory row open in the target bank group
        input         bg_mem_open;
        input         rank_open;    // a row of any kind open in the target rank
        input         ch_pim_open;  // a PIM / memory row open anywhere in the channel
        input         ch_mem_open;
        input         in_pim;       // pim_mode
        reg mem_ok, pim_ok;
        begin
            mem_ok = DUAL ? 1'b1 : !in_pim;       // memory commands
            pim_ok = DUAL ? 1'b1 : in_pim;        // PIM commands
            if (q == C_ACT)
                state_ok = !b_mem_open && (DUAL || !b_pim_open) && mem_ok;
            else if (q == C_PRE)
                state_ok = mem_ok;
            else if (is_rds(q) || is_wrs(q))
                state_ok = b_mem_open && row_hit && mem_ok;
            else if (q == C_REF)
                state_ok = !REF_PER_BANK && !rank_open;
            else if (q == C_REFPB)
                state_ok = REF_PER_BANK && !b_mem_open && !b_pim_open;
            else if (q == C_GACT)
                state_ok = !bg_pim_open && (DUAL || !bg_mem_open) && pim_ok;
            else if (q == C_COMP || q == C_GEMV)
                state_ok = ch_pim_open && pim_ok;
            else if (q == C_ENTER)
                state_ok = !DUAL && !in_pim && !ch_mem_open;
            else if (q == C_EXIT)
                state_ok = !DUAL && in_pim;
            else                                  // PIM_HEADER GWRITE READRES PIM_PRE
                state_ok = pim_ok;
        end
    endfunction

    // ---------------------------------------------------------------- activation window
    // weight of the activations of each port's target rank issued in the last T_FAW cycles
    genvar gs;
    generate
        for (gs = 0; gs < FAW_ACTS; gs = gs + 1) begin : g_faw
            wire [WSUM_W-1:0] m_w = (now - faw_t[m_r * FAW_ACTS + gs] < T_FAW)
                                    ? faw_w[m_r * FAW_ACTS + gs] : {WSUM_W{1'b0}};
            wire [WSUM_W-1:0] p_w = (now - faw_t[p_r * FAW_ACTS + gs] < T_FAW)
                                    ? faw_w[p_r * FAW_ACTS + gs] : {WSUM_W{1'b0}};
            wire [WSUM_W-1:0] m_sum, p_sum;      // slots 0..gs
            if (gs == 0) begin : g_first
                assign m_sum = m_w;
                assign p_sum = p_w;
            end else begin : g_next
                assign m_sum = g_faw[gs - 1].m_sum + m_w;
                assign p_sum = g_faw[gs - 1].p_sum + p_w;
            end
        end
    endgenerate
    wire [WSUM_W-1:0] m_faw_sum = g_faw[FAW_ACTS - 1].m_sum;
    wire [WSUM_W-1:0] p_faw_sum = g_faw[FAW_ACTS - 1].p_sum;

    // ---------------------------------------------------------------- can-issue vectors
    function [TS_W-1:0] max4;
        input [TS_W-1:0] a, b, c, d;
        reg [TS_W-1:0] x, y;
        begin
            x = (a > b) ? a : b;
            y = (c > d) ? c : d;
            max4 = (x > y) ? x : y;
        end
    endfunction

    genvar gq;
    generate
        for (gq = 0; gq < NCMD; gq = gq + 1) begin : g_can
            // earliest cycle of command gq at each port's target: the largest stamp of the
            // nodes it covers (its scope: archsim.memory.spec.SCOPE)
            wire [TS_W-1:0] m_e, p_e;
            localparam CH_SCOPE = !(gq == C_GACT || gq == C_REF || gq == C_ACT || gq == C_PRE
                                    || gq == C_RD || gq == C_WR || gq == C_RDA || gq == C_WRA
                                    || gq == C_REFPB);
            if (gq == C_GACT) begin : g_bankgroup_scope
                assign m_e = max4(ch_t[gq], rank_t[m_r * NCMD + gq], bg_t[m_rg * NCMD + gq],
                                  bk_of_bg[m_rg * NCMD + gq]);
                assign p_e = max4(ch_t[gq], rank_t[p_r * NCMD + gq], bg_t[p_rg * NCMD + gq],
                                  bk_of_bg[p_rg * NCMD + gq]);
            end else if (gq == C_REF) begin : g_rank_scope
                assign m_e = max4(ch_t[gq], rank_t[m_r * NCMD + gq], bg_of_rank[m_r * NCMD + gq],
                                  bk_of_rank[m_r * NCMD + gq]);
                assign p_e = max4(ch_t[gq], rank_t[p_r * NCMD + gq], bg_of_rank[p_r * NCMD + gq],
                                  bk_of_rank[p_r * NCMD + gq]);
            end else if (gq == C_ACT || gq == C_PRE || gq == C_RD || gq == C_WR || gq == C_RDA
                         || gq == C_WRA || gq == C_REFPB) begin : g_bank_scope
                assign m_e = max4(ch_t[gq], rank_t[m_r * NCMD + gq], bg_t[m_rg * NCMD + gq],
                                  bank_t[m_b * NCMD + gq]);
                assign p_e = max4(ch_t[gq], rank_t[p_r * NCMD + gq], bg_t[p_rg * NCMD + gq],
                                  bank_t[p_b * NCMD + gq]);
            end else begin : g_channel_scope
                assign m_e = max4(ch_t[gq], rank_all[gq], bg_all[gq], bk_all[gq]);
                assign p_e = m_e;
            end
            wire m_faw_ok = (gq == C_ACT) ? (m_faw_sum + W_ACT <= FAW_ACTS)
                          : (gq == C_GACT) ? (m_faw_sum + W_GACT <= FAW_ACTS) : 1'b1;
            wire p_faw_ok = (gq == C_ACT) ? (p_faw_sum + W_ACT <= FAW_ACTS)
                          : (gq == C_GACT) ? (p_faw_sum + W_GACT <= FAW_ACTS) : 1'b1;
            assign m_can[gq] = (now >= m_e) && m_faw_ok && (m_addr_ok || CH_SCOPE) &&
                state_ok(gq, mem_open_r[m_b], pim_open_r[m_b], mem_row_r[m_b] == m_row,
                         m_bg_pim_open, m_bg_mem_open, m_rank_open, chan_pim_open,
                         chan_mem_open, pim_mode);
            assign p_can[gq] = (now >= p_e) && p_faw_ok && (p_addr_ok || CH_SCOPE) &&
                state_ok(gq, mem_open_r[p_b], pim_open_r[p_b], mem_row_r[p_b] == p_row,
                         p_bg_pim_open, p_bg_mem_open, p_rank_open, chan_pim_open,
                         chan_mem_open, pim_mode);
        end
    endgenerate

    assign p_grant = p_valid && (p_cmd < NCMD) && p_can[p_cmd];
    assign m_grant = m_valid && (m_cmd < NCMD) && m_can[m_cmd] && !p_grant;

    // ---------------------------------------------------------------- the issued command
    wire            issue  = p_grant || m_grant;
    wire [CMD_W-1:0] i_cmd  = p_grant ? p_cmd  : m_cmd;
    wire [31:0]     i_r    = p_grant ? p_r    : m_r;
    wire [31:0]     i_rg   = p_grant ? p_rg   : m_rg;
    wire [31:0]     i_b    = p_grant ? p_b    : m_b;
    wire [ROW_W-1:0] i_row = p_grant ? p_row  : m_row;
    wire [K_W-1:0]  i_k    = p_grant ? p_k    : m_k;
    // PIM_GEMV occupancy CSTEP x (max(k, FILL) + 1) (GEMV_BUSY, the NeuPIMs reference)
    wire [31:0] gemv_lat = CSTEP * (((i_k > FILL) ? i_k : FILL) + 1);
    // the nodes the issued command covers, as index ranges per level
    wire i_bank_scope = (i_cmd == C_ACT) || (i_cmd == C_PRE) || is_rds(i_cmd)
                        || is_wrs(i_cmd) || (i_cmd == C_REFPB);
    wire i_bg_scope   = (i_cmd == C_GACT);
    wire i_rank_scope = (i_cmd == C_REF);
    wire [31:0] r_lo  = (i_bank_scope || i_bg_scope || i_rank_scope) ? i_r : 0;
    wire [31:0] r_n   = (i_bank_scope || i_bg_scope || i_rank_scope) ? 1 : RANKS;
    wire [31:0] g_lo  = (i_bank_scope || i_bg_scope) ? i_rg : i_rank_scope ? i_r * BGS : 0;
    wire [31:0] g_n   = (i_bank_scope || i_bg_scope) ? 1 : i_rank_scope ? BGS : NBG;
    wire [31:0] b_lo  = i_bank_scope ? i_b : i_bg_scope ? i_rg * BANKS_PER_BG
                        : i_rank_scope ? i_r * BPR : 0;
    wire [31:0] b_n   = i_bank_scope ? 1 : i_bg_scope ? BANKS_PER_BG : i_rank_scope ? BPR : NB;

    // The stamp, window and row arrays are written with blocking assignments (Verilator 5.006
    // cannot delay an array write inside a loop); nothing but this block writes them and
    // only continuous assignments read them, so the result is the same as with delayed
    // writes: every value this block reads (the issued command, the stamps before their own
    // update) is the one before the edge.
    integer q, n, r;
    reg [TS_W-1:0] v_ch, v_rk, v_bg, v_bk;
    reg [31:0] l_ch;
    reg [CMD_W-1:0] x_cmd;
    reg [ROW_W-1:0] x_row;
    reg [31:0] x_r, x_rg, x_b, x_gemv_lat, x_r_lo, x_r_n, x_g_lo, x_g_n, x_b_lo, x_b_n;
    always @(posedge clk) begin
        if (!rst_n) begin
            now <= 0;
            mem_open_r <= {NB{1'b0}};
            pim_open_r <= {NB{1'b0}};
            pim_mode <= 1'b0;
            gemv_end <= 0;
            for (n = 0; n < NB; n = n + 1) begin
                mem_row_r[n] = {ROW_W{1'b0}};
                pim_row_r[n] = {ROW_W{1'b0}};
            end
            for (q = 0; q < NCMD; q = q + 1) begin
                ch_t[q] = 0; rank_all[q] = 0; bg_all[q] = 0; bk_all[q] = 0;
                for (n = 0; n < RANKS; n = n + 1) begin
                    rank_t[n * NCMD + q] = 0; bg_of_rank[n * NCMD + q] = 0;
                    bk_of_rank[n * NCMD + q] = 0;
                end
                for (n = 0; n < NBG; n = n + 1) begin
                    bg_t[n * NCMD + q] = 0; bk_of_bg[n * NCMD + q] = 0;
                end
                for (n = 0; n < NB; n = n + 1) bank_t[n * NCMD + q] = 0;
            end
            for (n = 0; n < RANKS * FAW_ACTS; n = n + 1) begin
                faw_t[n] = 0;
                faw_w[n] = 0;
            end
        end else begin
            now <= now + 1'b1;
            // the issued command, read once before any array is written
            x_cmd = i_cmd; x_r = i_r; x_rg = i_rg; x_b = i_b; x_row = i_row;
            x_gemv_lat = gemv_lat;
            x_r_lo = r_lo; x_r_n = r_n; x_g_lo = g_lo; x_g_n = g_n; x_b_lo = b_lo; x_b_n = b_n;
            if (issue) begin
                // ---- timing: raise every covered stamp to now + L(level, x_cmd, q)
                for (q = 0; q < NCMD; q = q + 1) begin
                    l_ch = lat_rom[LV_CH * NPAIR + x_cmd * NCMD + q];
                    if (x_cmd == C_GEMV && gemv_follower(q) && x_gemv_lat > l_ch) l_ch = x_gemv_lat;
                    v_ch = now + l_ch;
                    v_rk = now + lat_rom[LV_RANK * NPAIR + x_cmd * NCMD + q];
                    v_bg = now + lat_rom[LV_BG * NPAIR + x_cmd * NCMD + q];
                    v_bk = now + lat_rom[LV_BANK * NPAIR + x_cmd * NCMD + q];
                    if (v_ch > ch_t[q]) ch_t[q] = v_ch;
                    if (lat_rom[LV_RANK * NPAIR + x_cmd * NCMD + q] != 0) begin
                        for (n = x_r_lo; n < x_r_lo + x_r_n; n = n + 1)
                            if (v_rk > rank_t[n * NCMD + q]) rank_t[n * NCMD + q] = v_rk;
                        if (v_rk > rank_all[q]) rank_all[q] = v_rk;
                    end
                    if (lat_rom[LV_BG * NPAIR + x_cmd * NCMD + q] != 0) begin
                        for (n = x_g_lo; n < x_g_lo + x_g_n; n = n + 1)
                            if (v_bg > bg_t[n * NCMD + q]) bg_t[n * NCMD + q] = v_bg;
                        for (r = x_r_lo; r < x_r_lo + x_r_n; r = r + 1)
                            if (v_bg > bg_of_rank[r * NCMD + q]) bg_of_rank[r * NCMD + q] = v_bg;
                        if (v_bg > bg_all[q]) bg_all[q] = v_bg;
                    end
                    if (lat_rom[LV_BANK * NPAIR + x_cmd * NCMD + q] != 0) begin
                        for (n = x_b_lo; n < x_b_lo + x_b_n; n = n + 1)
                            if (v_bk > bank_t[n * NCMD + q]) bank_t[n * NCMD + q] = v_bk;
                        for (n = x_g_lo; n < x_g_lo + x_g_n; n = n + 1)
                            if (v_bk > bk_of_bg[n * NCMD + q]) bk_of_bg[n * NCMD + q] = v_bk;
                        for (r = x_r_lo; r < x_r_lo + x_r_n; r = r + 1)
                            if (v_bk > bk_of_rank[r * NCMD + q]) bk_of_rank[r * NCMD + q] = v_bk;
                        if (v_bk > bk_all[q]) bk_all[q] = v_bk;
                    end
                end
                // ---- activation window of the rank
                if (is_acts(x_cmd)) begin
                    for (n = FAW_ACTS - 1; n > 0; n = n - 1) begin
                        faw_t[x_r * FAW_ACTS + n] = faw_t[x_r * FAW_ACTS + n - 1];
                        faw_w[x_r * FAW_ACTS + n] = faw_w[x_r * FAW_ACTS + n - 1];
                    end
                    faw_t[x_r * FAW_ACTS] = now;
                    faw_w[x_r * FAW_ACTS] = (x_cmd == C_ACT) ? W_ACT : W_GACT;
                end
                // ---- row buffers and mode
                if (x_cmd == C_ACT) begin
                    mem_open_r[x_b] <= 1'b1;
                    mem_row_r[x_b] = x_row;
                end
                if (x_cmd == C_PRE || x_cmd == C_RDA || x_cmd == C_WRA)
                    mem_open_r[x_b] <= 1'b0;
                if (x_cmd == C_GACT)
                    for (n = x_b_lo; n < x_b_lo + x_b_n; n = n + 1) begin
                        pim_open_r[n] <= 1'b1;
                        pim_row_r[n] = x_row;
                    end
                if (x_cmd == C_PPRE) pim_open_r <= {NB{1'b0}};
                if (x_cmd == C_ENTER) pim_mode <= 1'b1;
                if (x_cmd == C_EXIT) pim_mode <= 1'b0;
                if (x_cmd == C_GEMV) gemv_end <= now + x_gemv_lat;
            end
        end
    end
endmodule
