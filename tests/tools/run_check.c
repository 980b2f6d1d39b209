/*
 * run_check DIR [--final]: checks a run directory after a kill or a fault
 * (tests/dpt_test_rundir.h) and prints one line of counts. Exit 0 when
 * every checkpoint loads and config.conf is complete or absent; with
 * --final (a run that finished) also no temporaries, no cut row, and
 * result.jsonl's iterations 1, 2, ... with none missing or repeated, and as
 * many TensorBoard Events as rows, their steps increasing.
 * Exit 1 otherwise, 2 on bad usage. Used by tests/fault_kill_test.sh.
 */
#include "dpt_test_rundir.h"

int main(int argc, char **argv)
{
    int final = argc == 3 && strcmp(argv[2], "--final") == 0;
    if (argc != 2 && !final) {
        fprintf(stderr, "usage: run_check DIR [--final]\n");
        return 2;
    }
    dpt_test_rundir_t r;
    int bad = dpt_test_rundir_check(argv[1], &r);
    printf("checkpoints %d newest %llu config %d temporaries %d cut_rows %d rows %llu last %llu "
           "gaps %d events %llu in %d files, %d repeated, bad %d\n",
           r.checkpoints, r.newest, r.config, r.temporaries, r.cut_rows, r.rows, r.last_iter,
           r.gaps, r.events, r.events_files, r.events_repeats, bad);
    if (bad)
        return 1;
    if (final && (r.temporaries || r.cut_rows || r.gaps || r.rows != r.last_iter ||
                  (r.events_files && r.events != r.rows) || r.events_repeats)) {
        printf("not a clean finished run\n");
        return 1;
    }
    return 0;
}
