// verilator_main.cpp -- the simulation loop of a Verilator build driven by cocotb's VPI library.
//
// Why this file exists: cocotb 2.1's own main (cocotb/share/lib/verilator/verilator.cpp) calls
// VerilatedVpi::evalNeeded/clearEvalNeeded/doInertialPuts, which Verilator added in 5.036;
// Debian 12's verilator is 5.006, on which that file does not compile. This loop is cocotb's
// without the inertial-write API (the loop cocotb 1.8/1.9 shipped for Verilator 5.006+), so the
// harness runs the simulator with COCOTB_TRUST_INERTIAL_WRITES=0: cocotb applies its writes
// itself in the ReadWrite region, as it does on Icarus. archsim.cosim.simulators builds every
// Verilator target with this file in place of cocotb's.
//
// Per time step: evaluate until no VPI value-change or ReadWrite callback changes anything,
// end the step, run the ReadOnly callbacks (and dump the trace), then jump to the next time
// that cocotb (cbAfterDelay) or the design (timing events) asks for; no deadline ends the run.
#include <memory>
#include <string>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

#if VM_TRACE
#include <verilated_vcd_c.h>
static VerilatedVcdC *tfp = nullptr;
#endif

static vluint64_t main_time = 0;  // simulation time in time precision units

double sc_time_stamp() { return main_time; }  // $time

extern "C" {
void vlog_startup_routines_bootstrap(void);
}

static bool settle_value_callbacks() {
    // value-change callbacks may write signals: repeat until nothing is called
    bool called = VerilatedVpi::callValueCbs();
    bool again = called;
    while (again) again = VerilatedVpi::callValueCbs();
    return called;
}

static void wrap_up() {
    VerilatedVpi::callCbs(cbEndOfSimulation);
#if VM_TRACE
    if (tfp) tfp->close();
#endif
}

int main(int argc, char **argv) {
    bool trace_on = false;
    for (int i = 1; i < argc; i++) {
        if (std::string(argv[i]) == "--trace") {
#if VM_TRACE
            trace_on = true;
#else
            fprintf(stderr, "Error: --trace needs a build with waves\n");
            return 2;
#endif
        }
    }
    Verilated::commandArgs(argc, argv);
    std::unique_ptr<Vtop> top(new Vtop(""));
    Verilated::fatalOnVpiError(false);  // cocotb probes system tasks the design lacks
#if VM_TRACE
    Verilated::traceEverOn(true);
    if (trace_on) {
        tfp = new VerilatedVcdC;
        top->trace(tfp, 99);
        tfp->open("dump.vcd");
    }
#endif
    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void *) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    settle_value_callbacks();

    const vluint64_t kNone = static_cast<vluint64_t>(~0ULL);
    while (!Verilated::gotFinish()) {
        bool again = true;
        while (again) {
            top->eval_step();
            again = settle_value_callbacks();
            again |= VerilatedVpi::callCbs(cbReadWriteSynch);
            again |= settle_value_callbacks();
        }
        top->eval_end_step();
        VerilatedVpi::callCbs(cbReadOnlySynch);
#if VM_TRACE
        if (tfp) tfp->dump(main_time);
#endif
        vluint64_t next_cb = VerilatedVpi::cbNextDeadline();
        vluint64_t next_ev = top->eventsPending() ? top->nextTimeSlot() : kNone;
        vluint64_t next = next_cb < next_ev ? next_cb : next_ev;
        if (next == kNone) break;
        main_time = next;
        VerilatedVpi::callCbs(cbNextSimTime);
        settle_value_callbacks();
        VerilatedVpi::callTimedCbs();  // e.g. the clock's timer, start of the time step
        settle_value_callbacks();
    }
    top->final();
    wrap_up();
#if VM_TRACE
    delete tfp;
    tfp = nullptr;
#endif
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
