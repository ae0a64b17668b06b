#include <cstdio>
int main() { std::puts("pagoda"); return 0; }
