// Must not compile: the probe target links only ndt_formats, which may not see kernels/.
#include "kernels/digest_v1.h"
int NdtLayeringForbidden() { return 0; }
