/*
 * tools/plot.h — `dpt plot`: learning curves of run directories as SVG.
 *
 * plot.c reads the runs (dpt_metrics_load, config.conf), groups the runs
 * whose configs differ only in seed and bookkeeping keys, and puts each
 * group's runs on one x grid; plot_svg.c draws the result. Nothing here
 * depends on anything but libc and the library.
 */
#ifndef DPT_TOOLS_PLOT_H
#define DPT_TOOLS_PLOT_H

#include <stddef.h>
#include <stdio.h>

/* One curve: the mean over a group's runs at each x, and the band drawn
 * around it (min and max, or mean -+ standard deviation). */
typedef struct plot_curve {
    char label[256];            /* legend text */
    size_t runs;                /* runs in the group */
    size_t n;                   /* points */
    double *x, *mean, *lo, *hi; /* n values each: one allocation at x, the caller's */
} plot_curve_t;

typedef struct plot_chart {
    const char *title, *xlabel, *ylabel, *band; /* band: legend note ("min-max") */
    const plot_curve_t *curves;
    size_t ncurves;
} plot_chart_t;

/* Writes the chart as one SVG document (starting "<svg") to f: axes with
 * ticks and labels, each curve's band and mean line in its own color, and a
 * legend below the axes. Returns 0, or -1 when writing failed (errno). */
int plot_svg_write(FILE *f, const plot_chart_t *chart);

#endif
