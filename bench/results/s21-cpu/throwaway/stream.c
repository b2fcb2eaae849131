/* throwaway: Q8_0 8-row kernel variants streaming a 1.2 GB buffer, 1 thread, alternating */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef struct { float d, s; int8_t qs[32]; } block_q8a;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static inline __m512i act_pair_idx(int a,int b){return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(a)),_mm256_set1_epi32(b),1);}
static inline __m256i sum_halves(__m512i v){return _mm256_add_epi32(_mm512_castsi512_si256(v),_mm512_extracti64x4_epi64(v,1));}
#define KERNEL(NAME, PFSTMT) \
static void NAME(int n,const void*wv,const void*av,float*out){ const uint8_t*w=wv; const block_q8a*a=av; const __m512i zero=_mm512_setzero_si512(); \
 const __m512i idx[4]={act_pair_idx(0,1),act_pair_idx(2,3),act_pair_idx(4,5),act_pair_idx(6,7)}; __m256 acc=_mm256_setzero_ps(); \
 for(int b=0;b<n/32;b++,w+=16+8*32){ PFSTMT; \
  const __m512i act=_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)a[b].qs)); __m512i i0=zero,i1=zero; \
  for(int s=0;s<4;s+=2){ const __m512i x0=_mm512_loadu_si512(w+16+64*s),x1=_mm512_loadu_si512(w+16+64*(s+1)); \
   const __m512i a0=_mm512_permutexvar_epi32(idx[s],act),a1=_mm512_permutexvar_epi32(idx[s+1],act); \
   i0=_mm512_dpbusd_epi32(i0,_mm512_abs_epi8(x0),_mm512_mask_sub_epi8(a0,_mm512_movepi8_mask(x0),zero,a0)); \
   i1=_mm512_dpbusd_epi32(i1,_mm512_abs_epi8(x1),_mm512_mask_sub_epi8(a1,_mm512_movepi8_mask(x1),zero,a1)); } \
  const __m256 dw=_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)w)); \
  acc=_mm256_fmadd_ps(_mm256_mul_ps(dw,_mm256_set1_ps(a[b].d)),_mm256_cvtepi32_ps(sum_halves(_mm512_add_epi32(i0,i1))),acc);} \
 _mm256_storeu_ps(out,acc);}
KERNEL(k_t0_4k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+4096+l,_MM_HINT_T0))
KERNEL(k_none, (void)0)
KERNEL(k_t0_8k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+8192+l,_MM_HINT_T0))
KERNEL(k_t0_16k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+16384+l,_MM_HINT_T0))
KERNEL(k_t0_2x, for(int l=0;l<272;l+=64){_mm_prefetch((const char*)w+4096+l,_MM_HINT_T0);_mm_prefetch((const char*)w+8192+l,_MM_HINT_T0);})
KERNEL(k_t1_4k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+4096+l,_MM_HINT_T1))
KERNEL(k_t2_8k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+8192+l,_MM_HINT_T2))
KERNEL(k_nta_4k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+4096+l,_MM_HINT_NTA))
KERNEL(k_t0_1k, for(int l=0;l<272;l+=64)_mm_prefetch((const char*)w+1024+l,_MM_HINT_T0))
typedef void (*kfn)(int,const void*,const void*,float*);
#define BODY(W,A0,I0,I1) { const __m512i x0=_mm512_loadu_si512(W+16+64*s),x1=_mm512_loadu_si512(W+16+64*(s+1)); \
   I0=_mm512_dpbusd_epi32(I0,_mm512_abs_epi8(x0),_mm512_mask_sub_epi8(a0,_mm512_movepi8_mask(x0),zero,a0)); \
   I1=_mm512_dpbusd_epi32(I1,_mm512_abs_epi8(x1),_mm512_mask_sub_epi8(a1,_mm512_movepi8_mask(x1),zero,a1)); }
#define KERNEL2(NAME, PFSTMT) \
static void NAME(int n,const void*wv,const void*wv2,const void*av,float*out,float*out2){ const uint8_t*w=wv,*v=wv2; const block_q8a*a=av; const __m512i zero=_mm512_setzero_si512(); \
 const __m512i idx[4]={act_pair_idx(0,1),act_pair_idx(2,3),act_pair_idx(4,5),act_pair_idx(6,7)}; __m256 acc=_mm256_setzero_ps(),accv=acc; \
 for(int b=0;b<n/32;b++,w+=16+8*32,v+=272){ PFSTMT; \
  const __m512i act=_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)a[b].qs)); __m512i i0=zero,i1=zero,j0=zero,j1=zero; \
  for(int s=0;s<4;s+=2){ const __m512i a0=_mm512_permutexvar_epi32(idx[s],act),a1=_mm512_permutexvar_epi32(idx[s+1],act); \
   BODY(w,a0,i0,i1) BODY(v,a0,j0,j1) } \
  const __m256 dw=_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)w)), dv=_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)v)); \
  acc=_mm256_fmadd_ps(_mm256_mul_ps(dw,_mm256_set1_ps(a[b].d)),_mm256_cvtepi32_ps(sum_halves(_mm512_add_epi32(i0,i1))),acc); \
  accv=_mm256_fmadd_ps(_mm256_mul_ps(dv,_mm256_set1_ps(a[b].d)),_mm256_cvtepi32_ps(sum_halves(_mm512_add_epi32(j0,j1))),accv);} \
 _mm256_storeu_ps(out,acc); _mm256_storeu_ps(out2,accv);}
KERNEL2(k2_none,(void)0)
KERNEL2(k2_t0_4k, for(int l=0;l<272;l+=64){_mm_prefetch((const char*)w+4096+l,_MM_HINT_T0);_mm_prefetch((const char*)v+4096+l,_MM_HINT_T0);})
KERNEL2(k2_nta_4k, for(int l=0;l<272;l+=64){_mm_prefetch((const char*)w+4096+l,_MM_HINT_NTA);_mm_prefetch((const char*)v+4096+l,_MM_HINT_NTA);})
typedef void (*kfn2)(int,const void*,const void*,const void*,float*,float*);

static double probe(const uint8_t*p,size_t n){ __m512i s0=_mm512_setzero_si512(),s1=s0,s2=s0,s3=s0;
 for(size_t i=0;i<n;i+=256){ s0=_mm512_add_epi64(s0,_mm512_load_si512(p+i)); s1=_mm512_add_epi64(s1,_mm512_load_si512(p+i+64));
  s2=_mm512_add_epi64(s2,_mm512_load_si512(p+i+128)); s3=_mm512_add_epi64(s3,_mm512_load_si512(p+i+192)); }
 return (double)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0,s1),_mm512_add_epi64(s2,s3))); }
int main(int argc,char**argv){
 const int K=2048; const size_t group=(size_t)K/32*272; const size_t ngroups=(argc>1?atol(argv[1]):4400); /* 4400*8 rows ~ 1.2GB/... */
 const int reps=argc>2?atoi(argv[2]):15;
 size_t bytes=group*ngroups; uint8_t*w=aligned_alloc(64,(bytes+8191)/64*64+8192); 
 for(size_t i=0;i<bytes+8192;i++) w[i]=(uint8_t)(i*2654435761u>>13);
 for(size_t g=0;g<ngroups;g++) for(int b=0;b<K/32;b++){ uint16_t*d=(uint16_t*)(w+g*group+b*272); for(int r=0;r<8;r++) d[r]=0x3c00; }
 block_q8a*a=aligned_alloc(64,sizeof(block_q8a)*K/32); for(int b=0;b<K/32;b++){a[b].d=1;a[b].s=0;for(int j=0;j<32;j++)a[b].qs[j]=(int8_t)(j*7-100);}
 float*out=aligned_alloc(64,sizeof(float)*8*ngroups);
 const char*names[]={"probe","t0_4k","half","sl16","alt","alt3","alt_pf8k"}; kfn fns[]={0,k_t0_4k,0,0,0,0,0};
 kfn2 f2[]={0,0,k2_t0_4k,0,0,0,0}; int dist[]={0,0,0,0,0,0,0}; int slice[]={0,0,0,16,0,0,0}; int alt[]={0,0,0,0,2,3,0};
 const int nv=7; double *t=calloc(nv*reps,sizeof(double)); volatile double sink=0;
 printf("buffer %.2f GB\n",bytes/1e9);
 for(int r=0;r<reps;r++) for(int vv=0;vv<nv;vv++){ int v=(vv+r)%nv; double t0=now();
   if(dist[v]){ size_t D=dist[v]; for(size_t g0=0;g0+2*D<=ngroups;g0+=2*D) for(size_t g=g0;g<g0+D;g++) f2[v](K,w+g*group,w+(g+D)*group,a,out+8*g,out+8*(g+D));} else if(alt[v]){ size_t h=ngroups/alt[v]; for(size_t g=0;g<h;g++) for(int s2=0;s2<alt[v];s2++) k_t0_4k(K,w+(g+s2*h)*group,a,out+8*(g+s2*h)); } else if(v==6){ size_t h=ngroups/2; for(size_t g=0;g<h;g++){ k_t0_8k(K,w+g*group,a,out+8*g); k_t0_8k(K,w+(g+h)*group,a,out+8*(g+h)); } } else if(slice[v]){ size_t h=ngroups/2; int S=slice[v]; float tmp[8]; for(size_t g=0;g<h;g++){ float *o0=out+8*g,*o1=out+8*(g+h); for(int r=0;r<8;r++)o0[r]=o1[r]=0; for(int b=0;b<K/32;b+=S){ k_t0_4k(S*32,w+g*group+b*272,a+b,tmp); for(int r=0;r<8;r++)o0[r]+=tmp[r]; k_t0_4k(S*32,w+(g+h)*group+b*272,a+b,tmp); for(int r=0;r<8;r++)o1[r]+=tmp[r];} } } else if(v==99){ size_t q=ngroups/4; for(size_t g=0;g<q;g++){ f2[v](K,w+g*group,w+(g+q)*group,a,out+8*g,out+8*(g+q)); f2[v](K,w+(g+2*q)*group,w+(g+3*q)*group,a,out+8*g,out+8*(g+q));} } else if(f2[v]){ size_t h=ngroups/2; for(size_t g=0;g<h;g++) f2[v](K,w+g*group,w+(g+h)*group,a,out+8*g,out+8*(g+h)); } else if(!fns[v]) sink+=probe(w,bytes); else for(size_t g=0;g<ngroups;g++) fns[v](K,w+g*group,a,out+8*g);
   t[v*reps+r]=now()-t0; }
 for(int v=0;v<nv;v++){ double*x=t+v*reps; for(int i=0;i<reps;i++)for(int j=i+1;j<reps;j++)if(x[j]<x[i]){double s=x[i];x[i]=x[j];x[j]=s;}
   printf("%-8s median %6.2f GB/s  [%6.2f-%6.2f]\n",names[v],bytes/x[reps/2]/1e9,bytes/x[reps-1]/1e9,bytes/x[0]/1e9);}
 return (int)sink&0; }
