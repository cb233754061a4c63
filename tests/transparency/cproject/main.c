/* The small C project's main: sums every unit's value. */
#include <stdio.h>
int unit1_value(int), unit2_value(int), unit3_value(int), unit4_value(int), unit5_value(int), unit6_value(int);
int main(void) {
  printf("total %d\n",
         unit1_value(10) + unit2_value(10) + unit3_value(10) + unit4_value(10) + unit5_value(10) + unit6_value(10));
  return 0;
}
