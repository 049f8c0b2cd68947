// The resize of the GLM-4.1V image processor (see resize.cc for the algorithm).
#ifndef AUTOGLM_IMAGE_RESIZE_H_
#define AUTOGLM_IMAGE_RESIZE_H_

#include "image/image.h"

namespace ag::image {

// Bit for bit what torchvision's resize(uint8 image, [out_height, out_width],
// BICUBIC, antialias=True) computes on an x86 CPU.
RgbImage ResizeBicubicAntialias(const RgbImage& src, int out_height, int out_width);

}  // namespace ag::image

#endif  // AUTOGLM_IMAGE_RESIZE_H_
