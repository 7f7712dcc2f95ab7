/*
 * A stand-in for Windows' bcryptprimitives.dll, for running tether's Windows
 * build under Debian's Wine 8.0, which lacks that DLL. Rust's standard library
 * draws its random numbers (HashMap seeds) from ProcessPrng there; this version
 * answers from RtlGenRandom (advapi32's SystemFunction036), which Wine has.
 * Used only by tests/wine/run.sh, in a Wine prefix of its own; never shipped.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
