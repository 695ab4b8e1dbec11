// Re-executes the process once with glibc's malloc on transparent huge pages (see
// hugepage_heap.cc for why and what it measured); returns when it does not.
#pragma once

namespace kiln::app {

void reexec_with_hugepage_heap(char** argv);

}  // namespace kiln::app
