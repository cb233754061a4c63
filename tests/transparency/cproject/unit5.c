/* A translation unit of the small C project built by make -j2 in the transparency test. */
int unit5_value(int x) {
  int s = 0;
  for (int k = 0; k < x; ++k) s += k * 5;
  return s;
}
