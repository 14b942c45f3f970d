/* Random-row gather rate: the time per gather of a 128-byte row (rank 32, f32) at a
 * uniformly random index of a ROWS-row table, 2 OpenMP threads, optionally with a
 * software prefetch LOOK gathers ahead and the table on transparent huge pages.
 *   gcc -O3 -mavx512f -fopenmp gather.c -o gather
 *   OMP_NUM_THREADS=2 ./gather ROWS LOOK HUGE GATHERS      (best of 5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <immintrin.h>
#include <sys/mman.h>
int main(int argc,char**argv){
  size_t rows=atol(argv[1]); int look=atoi(argv[2]); int huge=atoi(argv[3]); size_t n=atol(argv[4]);
  size_t bytes=rows*128; float*f=aligned_alloc(1<<21,(bytes+(1<<21))&~((1ul<<21)-1));
  if(huge) madvise(f,bytes,MADV_HUGEPAGE);
  for(size_t i=0;i<rows*32;i++) f[i]=1.0f/(i%7+1);
  unsigned*ix=malloc(n*4); unsigned s=12345; for(size_t i=0;i<n;i++){s=s*1103515245u+12345u; ix[i]=((size_t)s*rows)>>32;}
  double best=1e9;
  for(int rep=0;rep<5;rep++){
    double t=omp_get_wtime(); float tot=0;
    #pragma omp parallel reduction(+:tot)
    { int T=omp_get_num_threads(), id=omp_get_thread_num(); size_t a=n*id/T,b=n*(id+1)/T;
      __m512 s0=_mm512_setzero_ps(), s1=s0;
      for(size_t j=a;j<b;j++){
        if(look && j+look<b){ const char*p=(const char*)(f+(size_t)ix[j+look]*32); _mm_prefetch(p,_MM_HINT_T0); _mm_prefetch(p+64,_MM_HINT_T0);}
        const float*p=f+(size_t)ix[j]*32; s0=_mm512_add_ps(s0,_mm512_load_ps(p)); s1=_mm512_add_ps(s1,_mm512_load_ps(p+16));
      }
      tot+=_mm512_reduce_add_ps(_mm512_add_ps(s0,s1)); }
    t=omp_get_wtime()-t; if(t<best)best=t; if(tot==0.123f)puts("");
  }
  printf("rows %zu look %d huge %d: %.2f ms for %zu gathers, %.2f ns/gather, %.2f GB/s of lines\n",rows,look,huge,best*1e3,n,best*1e9/n, n*128/best/1e9);
}
