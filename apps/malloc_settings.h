// How the kiln process configures glibc's malloc (malloc_settings.cc says why and what it
// measured).
#pragma once

namespace kiln::app {

// Re-executes the process once with glibc's malloc on transparent huge pages; returns when it
// does not.
void reexec_with_hugepage_heap(char** argv);

// Blocks of 1 MiB and more get mappings of their own, returned to the system when freed,
// whatever sizes were freed before; up to 1 MiB free at the top of a heap stays mapped for the
// next step.
void fix_malloc_thresholds();

}  // namespace kiln::app
