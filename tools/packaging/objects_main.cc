// The program whose link tools/package reads: its inputs are the object files
// of every library of //:coppice (and the CUDA kernels where built), which
// the package archives into libcoppice.a. It does nothing itself.
int main() { return 0; }
