#include <math.h>
#include "mathutils.h"

double hypotenuse(double a, double b)
{
    return sqrt(a * a + b * b);
}

long gcd(long a, long b)
{
    if (a < 0)
        a = -a;
    if (b < 0)
        b = -b;
    while (b != 0) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

unsigned long long factorial(unsigned n)
{
    unsigned long long r = 1;
    for (unsigned i = 2; i <= n; i++)
        r *= i;
    return r;
}
