#ifndef MATHUTILS_H
#define MATHUTILS_H

double hypotenuse(double a, double b);
long gcd(long a, long b);
unsigned long long factorial(unsigned n);

#endif
