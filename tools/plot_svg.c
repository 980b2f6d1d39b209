/*
 * The SVG of `dpt plot` (tools/plot.h), written by hand: a white canvas, a
 * title, a grid with "nice" ticks (1, 2 or 5 times a power of ten), the
 * axes' labels, per curve a translucent band and a mean line, and a legend
 * below the axes.
 */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Colors told apart with most kinds of color blindness, in order of use. */
static const char *const plot_colors[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                          "#e69f00", "#56b4e9", "#000000", "#f0e442"};
#define PLOT_NCOLORS (sizeof plot_colors / sizeof plot_colors[0])

/* Canvas and margins, in pixels. */
enum {
    PLOT_W = 860,
    PLOT_LEFT = 84,
    PLOT_RIGHT = 24,
    PLOT_TOP = 48,
    PLOT_AREA_H = 380,
    PLOT_BELOW = 62,
    PLOT_LEGEND_ROW = 20
};

typedef struct plot_axis {
    double lo, hi, step;
    int ticks; /* steps from lo to hi */
} plot_axis_t;

/* Ticks for [min, max]: about five steps of 1, 2 or 5 x 10^k, the range
 * widened to whole steps. */
static plot_axis_t plot_axis(double min, double max)
{
    plot_axis_t a;
    if (!(max > min)) {
        double pad = fabs(min) > 0 ? fabs(min) * 0.1 : 1.0;
        min -= pad;
        max += pad;
    }
    double raw = (max - min) / 5.0;
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    a.step = (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * mag;
    a.lo = floor(min / a.step + 1e-9) * a.step;
    a.hi = ceil(max / a.step - 1e-9) * a.step;
    a.ticks = (int)llround((a.hi - a.lo) / a.step);
    return a;
}

/* A tick's text: thousands as k, millions as M, billions as G, with the
 * decimals the step needs. */
static void plot_tick_text(char *buf, size_t n, double v, double step)
{
    static const char *const suffix[] = {"", "k", "M", "G"};
    int s = 0;
    double scale = 1.0;
    while (s < 3 && fabs(step) >= 1000.0 * scale)
        scale *= 1000.0, s++;
    double sv = v / scale, sstep = step / scale;
    int decimals = sstep >= 1.0 ? 0 : (int)ceil(-log10(sstep) - 1e-9);
    if (decimals > 9)
        decimals = 9;
    if (fabs(sv) < sstep * 1e-6) {
        snprintf(buf, n, "0"); /* neither "-0" nor "0k" */
        return;
    }
    snprintf(buf, n, "%.*f%s", decimals, sv, suffix[s]);
}

static void plot_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

typedef struct plot_frame {
    plot_axis_t x, y;
    double left, top, w, h;
} plot_frame_t;

static double plot_px(const plot_frame_t *fr, double x)
{
    return fr->left + (x - fr->x.lo) / (fr->x.hi - fr->x.lo) * fr->w;
}

static double plot_py(const plot_frame_t *fr, double y)
{
    return fr->top + fr->h - (y - fr->y.lo) / (fr->y.hi - fr->y.lo) * fr->h;
}

static double plot_tick(const plot_axis_t *a, int i)
{
    return a->lo + i * a->step;
}

static void plot_grid(FILE *f, const plot_frame_t *fr, const plot_chart_t *c)
{
    char t[64];
    fprintf(f, "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
    for (int i = 0; i <= fr->x.ticks; i++) {
        double px = plot_px(fr, plot_tick(&fr->x, i));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px, fr->top, px,
                fr->top + fr->h);
    }
    for (int i = 0; i <= fr->y.ticks; i++) {
        double py = plot_py(fr, plot_tick(&fr->y, i));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", fr->left, py,
                fr->left + fr->w, py);
    }
    fprintf(f, "</g>\n<g class=\"axes\" stroke=\"#333333\" stroke-width=\"1\">\n");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", fr->left,
            fr->top + fr->h, fr->left + fr->w, fr->top + fr->h);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n</g>\n", fr->left, fr->top,
            fr->left, fr->top + fr->h);
    fprintf(f, "<g class=\"ticks\" fill=\"#333333\">\n");
    for (int i = 0; i <= fr->x.ticks; i++) {
        double v = plot_tick(&fr->x, i);
        plot_tick_text(t, sizeof t, v, fr->x.step);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", plot_px(fr, v),
                fr->top + fr->h + 18, t);
    }
    for (int i = 0; i <= fr->y.ticks; i++) {
        double v = plot_tick(&fr->y, i);
        plot_tick_text(t, sizeof t, v, fr->y.step);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", fr->left - 8,
                plot_py(fr, v) + 4, t);
    }
    fprintf(f, "</g>\n<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
            fr->left + fr->w / 2, fr->top + fr->h + 42);
    plot_text(f, c->xlabel);
    fprintf(f,
            "</text>\n<text class=\"ylabel\" transform=\"translate(18 %.1f) rotate(-90)\" "
            "text-anchor=\"middle\">",
            fr->top + fr->h / 2);
    plot_text(f, c->ylabel);
    fprintf(f, "</text>\n");
}

static void plot_curve(FILE *f, const plot_frame_t *fr, const plot_curve_t *cv, const char *color)
{
    if (cv->n == 0)
        return; /* a group with no value yet: in the legend only */
    fprintf(f, "<path class=\"band\" fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" d=\"",
            color);
    for (size_t i = 0; i < cv->n; i++)
        fprintf(f, "%c%.1f,%.1f", i ? 'L' : 'M', plot_px(fr, cv->x[i]), plot_py(fr, cv->hi[i]));
    for (size_t i = cv->n; i-- > 0;)
        fprintf(f, "L%.1f,%.1f", plot_px(fr, cv->x[i]), plot_py(fr, cv->lo[i]));
    fprintf(f,
            "Z\"/>\n<path class=\"mean\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
            "stroke-linejoin=\"round\" stroke-linecap=\"round\" d=\"",
            color);
    for (size_t i = 0; i < cv->n; i++)
        fprintf(f, "%c%.1f,%.1f", i ? 'L' : 'M', plot_px(fr, cv->x[i]), plot_py(fr, cv->mean[i]));
    fprintf(f, "\"/>\n");
}

static void plot_legend(FILE *f, const plot_frame_t *fr, const plot_chart_t *c)
{
    double y = fr->top + fr->h + PLOT_BELOW;
    fprintf(f, "<g class=\"legend\">\n");
    for (size_t i = 0; i < c->ncurves; i++, y += PLOT_LEGEND_ROW) {
        const char *color = plot_colors[i % PLOT_NCOLORS];
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"12\" fill=\"%s\" "
                "fill-opacity=\"0.18\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"%s\" stroke-width=\"2\"/>\n",
                fr->left, y - 10, color, fr->left, y - 4, fr->left + 22, y - 4, color);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", fr->left + 30, y);
        plot_text(f, c->curves[i].label);
        fprintf(f, "</text>\n");
    }
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" fill=\"#666666\">line: mean over the runs of a "
            "group; band: ",
            fr->left, y);
    plot_text(f, c->band);
    fprintf(f, "</text>\n</g>\n");
}

int plot_svg_write(FILE *f, const plot_chart_t *c)
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (size_t k = 0; k < c->ncurves; k++)
        for (size_t i = 0; i < c->curves[k].n; i++) {
            const plot_curve_t *cv = &c->curves[k];
            xmin = fmin(xmin, cv->x[i]);
            xmax = fmax(xmax, cv->x[i]);
            ymin = fmin(ymin, fmin(cv->lo[i], cv->mean[i]));
            ymax = fmax(ymax, fmax(cv->hi[i], cv->mean[i]));
        }
    if (!isfinite(xmin)) /* no point at all: an empty frame */
        xmin = ymin = 0.0, xmax = ymax = 1.0;
    plot_frame_t fr;
    fr.x = plot_axis(xmin, xmax);
    fr.y = plot_axis(ymin, ymax);
    fr.left = PLOT_LEFT;
    fr.top = PLOT_TOP;
    fr.w = PLOT_W - PLOT_LEFT - PLOT_RIGHT;
    fr.h = PLOT_AREA_H;
    int height = PLOT_TOP + PLOT_AREA_H + PLOT_BELOW + (int)(c->ncurves + 1) * PLOT_LEGEND_ROW;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
            "font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            PLOT_W, height, PLOT_W, height, PLOT_W, height);
    fprintf(f,
            "<text class=\"title\" x=\"%.1f\" y=\"28\" text-anchor=\"middle\" "
            "font-size=\"16\">",
            fr.left + fr.w / 2);
    plot_text(f, c->title);
    fprintf(f, "</text>\n");
    plot_grid(f, &fr, c);
    for (size_t k = 0; k < c->ncurves; k++)
        plot_curve(f, &fr, &c->curves[k], plot_colors[k % PLOT_NCOLORS]);
    plot_legend(f, &fr, c);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
