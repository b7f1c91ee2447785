# libswscale: colour conversion and scaling into our NHWC rows.
# https://ffmpeg.org/doxygen/5.1/group__libsws.html
from libc.stdint cimport uint8_t


cdef extern from "libswscale/swscale.h" nogil:
    # the scalers `scale=...:flags=bilinear|bicubic|area|neighbor|lanczos` choose
    int SWS_BILINEAR
    int SWS_BICUBIC
    int SWS_AREA
    int SWS_POINT
    int SWS_LANCZOS

    struct SwsContext:
        pass

    unsigned swscale_version()
    int sws_isSupportedInput(int pix_fmt)
    SwsContext *sws_getContext(int srcW, int srcH, int srcFormat,
                               int dstW, int dstH, int dstFormat,
                               int flags, void *srcFilter, void *dstFilter,
                               const double *param)
    void sws_freeContext(SwsContext *swsContext)
    const int *sws_getCoefficients(int colorspace)
    int sws_setColorspaceDetails(SwsContext *c, const int *inv_table, int srcRange,
                                 const int *table, int dstRange,
                                 int brightness, int contrast, int saturation)
    int sws_getColorspaceDetails(SwsContext *c, int **inv_table, int *srcRange,
                                 int **table, int *dstRange,
                                 int *brightness, int *contrast, int *saturation)
    int sws_scale(SwsContext *c, const uint8_t *const srcSlice[],
                  const int srcStride[], int srcSliceY, int srcSliceH,
                  uint8_t *const dst[], const int dstStride[])
