// One warp: C = A @ B (16x16x16, B row-major K x N) staged in shared memory; A via ldmatrix x4, B via ldmatrix x2 transpose.
#layout = #hal.pipeline.layout<constants = 0, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @ldmatrix_gemm_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @ldmatrix_gemm ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @ldmatrix_gemm() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [32, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c2 = arith.constant 2 : index
        %a_m = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<16x16xf16>
        %b_m = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<16x16xf16>
        %c_m = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<16x16xf32>
        %sa = memref.alloc() : memref<16x16xf16, #gpu.address_space<workgroup>>
        %sb = memref.alloc() : memref<16x16xf16, #gpu.address_space<workgroup>>
        %l = gpu.thread_id x
        %r = affine.apply affine_map<(l) -> (l floordiv 2)>(%l)
        %cc = affine.apply affine_map<(l) -> ((l mod 2) * 8)>(%l)
        %va = vector.load %a_m[%r, %cc] : memref<16x16xf16>, vector<8xf16>
        vector.store %va, %sa[%r, %cc] : memref<16x16xf16, #gpu.address_space<workgroup>>, vector<8xf16>
        %vb = vector.load %b_m[%r, %cc] : memref<16x16xf16>, vector<8xf16>
        vector.store %vb, %sb[%r, %cc] : memref<16x16xf16, #gpu.address_space<workgroup>>, vector<8xf16>
        gpu.barrier
        %ar = affine.apply affine_map<(l) -> (l mod 8 + ((l floordiv 8) mod 2) * 8)>(%l)
        %ac = affine.apply affine_map<(l) -> ((l floordiv 16) * 8)>(%l)
        %afrag = nvgpu.ldmatrix %sa[%ar, %ac] numTiles = 4 transpose = false : memref<16x16xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
        %zc = arith.constant dense<0.0> : vector<2x2xf32>
        %g = affine.apply affine_map<(l) -> (l floordiv 4)>(%l)
        %g8 = affine.apply affine_map<(l) -> (l floordiv 4 + 8)>(%l)
        %bk = affine.apply affine_map<(l) -> (l mod 16)>(%l)
        scf.for %nt = %c0 to %c2 step %c1 {
          %bn = affine.apply affine_map<(nt) -> (nt * 8)>(%nt)
          %bfrag = nvgpu.ldmatrix %sb[%bk, %bn] numTiles = 2 transpose = true : memref<16x16xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
          %d = nvgpu.mma.sync(%afrag, %bfrag, %zc) mmaShape = [16, 8, 16] : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
          %col = affine.apply affine_map<(l, nt) -> ((l mod 4) * 2 + nt * 8)>(%l, %nt)
          %d0 = vector.extract %d[0] : vector<2xf32> from vector<2x2xf32>
          %d1 = vector.extract %d[1] : vector<2xf32> from vector<2x2xf32>
          vector.store %d0, %c_m[%g, %col] : memref<16x16xf32>, vector<2xf32>
          vector.store %d1, %c_m[%g8, %col] : memref<16x16xf32>, vector<2xf32>
        }
        return
      }
    }
  }
}
