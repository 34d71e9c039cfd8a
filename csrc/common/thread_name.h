// Names the calling thread as the OS shows it (top -H, py-spy, /proc/<pid>/task/*/comm), so that the CPU of the
// processor's and controller's threads can be told apart from the training process's own. Linux keeps 15 bytes.
#pragma once
#include <pthread.h>

namespace mindio {

inline void name_this_thread(const char* name) {
#ifdef __linux__
    pthread_setname_np(pthread_self(), name);
#else
    (void)name;
#endif
}

}  // namespace mindio
