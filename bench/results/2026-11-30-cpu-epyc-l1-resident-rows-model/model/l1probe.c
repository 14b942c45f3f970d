// Model: mode-0 (long output) MTTKRP row sum of a 3rd-order .tns with its gathered indices masked by MASK (63: every gathered row in L1), beside the fiber-factored sum.
// Build: gcc -O3 -march=native -fopenmp l1probe.c -o l1probe; run: OMP_NUM_THREADS=2 ./l1probe FILE.tns MODE MASK (4294967295: no mask)
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>
#define R 32
typedef struct {uint32_t j,k; float v;} E;
static int cmpk(const void*a,const void*b){const E*x=a,*y=b; if(x->k!=y->k) return x->k<y->k?-1:1; return x->j<y->j?-1:x->j>y->j;}
#define LD(p) _mm256_load_ps(p)
int main(int argc,char**argv){
  FILE*f=fopen(argv[1],"r"); int om=atoi(argv[2]); // output mode
  long cap=1<<20,n=0; uint32_t*X[3]; for(int m=0;m<3;m++)X[m]=malloc(cap*4); float*V0=malloc(cap*4);
  long a[3]; double v; long D[3]={0,0,0};
  while(fscanf(f,"%ld %ld %ld %lf",&a[0],&a[1],&a[2],&v)==4){ if(n==cap){cap*=2;for(int m=0;m<3;m++)X[m]=realloc(X[m],cap*4);V0=realloc(V0,cap*4);}
    for(int m=0;m<3;m++){X[m][n]=a[m]-1; if(a[m]>D[m])D[m]=a[m];} V0[n]=v; n++;}
  // output mode om, fiber mode fm = the shorter of the others, leaf mode lm
  int o1=(om+1)%3,o2=(om+2)%3; int fm= D[o1]<=D[o2]?o1:o2, lm= fm==o1?o2:o1;
  long I=D[om];
  long *ptr=calloc(I+2,8); for(long e=0;e<n;e++) ptr[X[om][e]+1]++; for(long i=0;i<I;i++) ptr[i+1]+=ptr[i];
  long *pos=malloc((I+1)*8); memcpy(pos,ptr,(I+1)*8);
  E*es=malloc(n*sizeof(E)); for(long e=0;e<n;e++){long p=pos[X[om][e]]++; es[p].j=X[lm][e]; es[p].k=X[fm][e]; es[p].v=V0[e];}
  #pragma omp parallel for schedule(dynamic,1024)
  for(long i=0;i<I;i++) qsort(es+ptr[i],ptr[i+1]-ptr[i],sizeof(E),cmpk);
  uint32_t*idx=aligned_alloc(64,n*8+64); float*val=aligned_alloc(64,n*4+64);
  for(long e=0;e<n;e++){idx[2*e]=es[e].j; idx[2*e+1]=es[e].k; val[e]=es[e].v;}
  // CSF: per row a range of fibers; per fiber k and a range of leaves
  long nf=0; for(long i=0;i<I;i++) for(long e=ptr[i];e<ptr[i+1];e++) if(e==ptr[i]||es[e].k!=es[e-1].k) nf++;
  uint32_t*rf=malloc((I+1)*4),*fk=malloc(nf*4),*fp=malloc((nf+1)*4),*lj=aligned_alloc(64,n*4+64);
  nf=0; for(long i=0;i<I;i++){ rf[i]=nf; for(long e=ptr[i];e<ptr[i+1];e++){ if(e==ptr[i]||es[e].k!=es[e-1].k){fk[nf]=es[e].k; fp[nf]=e; nf++;} lj[e]=es[e].j; } } rf[I]=nf; fp[nf]=n;
  long J=D[lm],K=D[fm];
  float *B=aligned_alloc(64,J*R*4),*C=aligned_alloc(64,K*R*4);
  for(long i=0;i<J*R;i++)B[i]=(i%1000)/1000.0f; for(long i=0;i<K*R;i++)C[i]=(i%997)/997.0f;
  float *out=aligned_alloc(64,I*R*4); memset(out,0,I*R*4);
  printf("out mode %d (I=%ld) fiber mode %d (%ld) leaf %d (%ld) nnz=%ld fibers=%ld (%.2f/fiber)\n",om,I,fm,K,lm,J,n,nf,(double)n/nf);
  int MASK=atoi(argv[3]); for(int variant=0;variant<2;variant++){
  double best=1e9;
  for(int rep=0;rep<7;rep++){
    double t0=omp_get_wtime();
    if(variant==0){
    #pragma omp parallel for schedule(static,4096)
    for(long i=0;i<I;i++){
      __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0;
      for(long e=ptr[i];e<ptr[i+1];e++){
        uint32_t j=idx[2*e]&MASK,k=idx[2*e+1]&MASK; __m256 x=_mm256_set1_ps(val[e]);
        const float*b=B+j*R,*c=C+k*R;
        a0=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(b)),LD(c),a0);
        a1=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(b+8)),LD(c+8),a1);
        a2=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(b+16)),LD(c+16),a2);
        a3=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(b+24)),LD(c+24),a3);
      }
      float*o=out+i*R; _mm256_stream_ps(o,a0);_mm256_stream_ps(o+8,a1);_mm256_stream_ps(o+16,a2);_mm256_stream_ps(o+24,a3);
    }
    } else {
    #pragma omp parallel for schedule(static,4096)
    for(long i=0;i<I;i++){
      __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0;
      for(uint32_t q=rf[i];q<rf[i+1];q++){
        __m256 f0=_mm256_setzero_ps(),f1=f0,f2=f0,f3=f0;
        for(uint32_t e=fp[q];e<fp[q+1];e++){
          __m256 x=_mm256_set1_ps(val[e]); const float*b=B+(size_t)lj[e]*R;
          f0=_mm256_fmadd_ps(x,LD(b),f0); f1=_mm256_fmadd_ps(x,LD(b+8),f1);
          f2=_mm256_fmadd_ps(x,LD(b+16),f2); f3=_mm256_fmadd_ps(x,LD(b+24),f3);
        }
        const float*c=C+(size_t)fk[q]*R;
        a0=_mm256_fmadd_ps(f0,LD(c),a0); a1=_mm256_fmadd_ps(f1,LD(c+8),a1);
        a2=_mm256_fmadd_ps(f2,LD(c+16),a2); a3=_mm256_fmadd_ps(f3,LD(c+24),a3);
      }
      float*o=out+i*R; _mm256_stream_ps(o,a0);_mm256_stream_ps(o+8,a1);_mm256_stream_ps(o+16,a2);_mm256_stream_ps(o+24,a3);
    }
    }
    double t=omp_get_wtime()-t0; if(t<best)best=t;
  }
  double cs=0; for(long i=0;i<I*R;i+=977) cs+=out[i];
  printf("variant %d best %.2f ms cs %.6g\n",variant,best*1e3,cs);
  }
}
