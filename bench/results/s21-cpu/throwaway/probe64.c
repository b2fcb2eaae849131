#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <omp.h>
#include <time.h>
typedef uint64_t v2u64 __attribute__((vector_size(64)));
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static inline v2u64 span(const v2u64*v,size_t lo,size_t hi,int pf,int dist){ v2u64 a={0},b=a,c=a,d=a;
 for(size_t i=lo;i<hi;i+=4){ if(pf) __builtin_prefetch(&v[i]+dist/4,0,3); a^=v[i];b^=v[i+1];c^=v[i+2];d^=v[i+3];} return a^b^c^d;}
static uint64_t pass(const v2u64*v,size_t vecs,int nt,int runs,size_t slice,int pf,int dist){ uint64_t tot=0;
#pragma omp parallel num_threads(nt) reduction(^:tot)
 { size_t me=omp_get_thread_num(),q=vecs/4; size_t lo=q*me/nt*4,hi=q*(me+1)/nt*4; size_t part=(hi-lo)/(4*runs)*4; v2u64 r={0};
   for(size_t i=0;i<part;i+=slice) for(int k=0;k<runs;k++){ size_t n=part-i<slice?part-i:slice; r^=span(v,lo+k*part+i,lo+k*part+i+n,pf,dist);} 
   tot^=r[0]^r[1]; }
 return tot; }
int main(int argc,char**argv){ int nt=atoi(argv[1]); size_t n=(size_t)2048<<20, vecs=n/64; v2u64*b=aligned_alloc(64,n);
#pragma omp parallel for num_threads(nt)
 for(size_t i=0;i<vecs;i++) b[i]=(v2u64){i,i+1};
 struct {int runs; size_t slice; int pf; int dist; const char*name;} V[]={{1,1<<18,0,128,"1run"},{2,64,1,128,"2run 4K pf2K"},{3,64,1,128,"3run 4K"},{4,64,1,128,"4run 4K"},{8,64,1,128,"8run 4K"},{4,128,1,128,"4run 8K"},{4,64,1,64,"4run pf4K"},{4,64,0,128,"4run nopf"}};
 const int nv=8,R=7; double t[8][7]; volatile uint64_t sink=0;
 for(int r=0;r<R;r++) for(int l=0;l<nv;l++){ int ll=(l+r)%nv; double t0=now(); sink+=pass(b,vecs,nt,V[ll].runs,V[ll].slice,V[ll].pf,V[ll].dist); t[ll][r]=n/(now()-t0)/1e9; }
 for(int l=0;l<nv;l++){ double*x=t[l]; for(int i=0;i<R;i++)for(int j=i+1;j<R;j++)if(x[j]<x[i]){double s=x[i];x[i]=x[j];x[j]=s;} printf("%-14s median %.2f [%.2f-%.2f]\n",V[l].name,x[R/2],x[0],x[R-1]); } }
