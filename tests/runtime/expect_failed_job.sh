#!/bin/bash
# Runs an MPI job that is meant to fail (a rank that leaves, a rank that is killed) and prints
# how the launcher ended. The test's verdict is its PASS_REGULAR_EXPRESSION on what the ranks
# and the launcher printed, not the launcher's status: Open MPI's mpirun now and then crashes
# in its own teardown after MPI_Abort (a segfault in PMIx_server_finalize, after the job has
# ended as the test expects; open-mpi/ompi issues 6222 and 13650), and CTest would count that
# signal as a failure whatever the output said. CTest's TIMEOUT still bounds the job.
"$@"
status=$?
echo "the launcher exited with status ${status}"
exit 0
