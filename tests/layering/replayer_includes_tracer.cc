// Must not compile: the probe target links only ndt_replayer, which may not see tracer/.
#include "tracer/recorder.h"
int NdtLayeringReplayerTracer() { return 0; }
