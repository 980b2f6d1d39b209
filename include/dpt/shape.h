/*
 * dpt/shape.h — the shape of one sample, shared by the layers (dpt/nn.h) and
 * by the observations of environments (dpt/env.h), which a plug-in env
 * includes without the rest of the library's headers.
 */
#ifndef DPT_SHAPE_H
#define DPT_SHAPE_H

#include <stddef.h>

/* The shape of one sample: channels, height and width of an image (NCHW,
 * dpt/conv.h), or {features, 1, 1} for a flat row. A row of a batch holds
 * c*h*w floats in that order, so an image batch [N, C, H, W] is the
 * row-major matrix [N, C*H*W] the layers read. */
typedef struct dpt_shape {
    size_t c, h, w;
} dpt_shape_t;

#endif /* DPT_SHAPE_H */
