// Tiled GEMM C(128x128 f32) = A(128xK) @ B(Kx128), f16: 64x64 workgroup tile, 4 warps of 32x32, K step 16 through shared memory, ldmatrix + mma.sync, grid 2x2.
#layout = #hal.pipeline.layout<constants = 1, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @tiled_gemm_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @tiled_gemm ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @tiled_gemm() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [128, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c2 = arith.constant 2 : index
        %c4 = arith.constant 4 : index
        %c16 = arith.constant 16 : index
        %k32 = hal.interface.constant.load layout(#layout) ordinal(0) : i32
        %K = arith.index_cast %k32 : i32 to index
        %A = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<128x?xf16>{%K}
        %B = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<?x128xf16>{%K}
        %C = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<128x128xf32>
        %sa = memref.alloc() : memref<64x16xf16, #gpu.address_space<workgroup>>
        %sb = memref.alloc() : memref<16x64xf16, #gpu.address_space<workgroup>>
        %tid = gpu.thread_id x
        %bx = gpu.block_id x
        %by = gpu.block_id y
        %lane = gpu.lane_id
        %w = gpu.subgroup_id : index
        %m0 = affine.apply affine_map<(b) -> (b * 64)>(%by)
        %n0 = affine.apply affine_map<(b) -> (b * 64)>(%bx)
        %ar_s = affine.apply affine_map<(t) -> (t floordiv 2)>(%tid)
        %ac_s = affine.apply affine_map<(t) -> ((t mod 2) * 8)>(%tid)
        %br_s = affine.apply affine_map<(t) -> (t floordiv 8)>(%tid)
        %bc_s = affine.apply affine_map<(t) -> ((t mod 8) * 8)>(%tid)
        %ga_r = affine.apply affine_map<(t)[m0] -> (t floordiv 2 + m0)>(%tid)[%m0]
        %gb_c = affine.apply affine_map<(t)[n0] -> ((t mod 8) * 8 + n0)>(%tid)[%n0]
        %wm = affine.apply affine_map<(w) -> ((w floordiv 2) * 32)>(%w)
        %wn = affine.apply affine_map<(w) -> ((w mod 2) * 32)>(%w)
        %ac = affine.apply affine_map<(l) -> ((l floordiv 16) * 8)>(%lane)
        %bk = affine.apply affine_map<(l) -> (l mod 16)>(%lane)
        %zero = arith.constant dense<0.0> : vector<2x4x2x2xf32>
        %acc = scf.for %k0 = %c0 to %K step %c16 iter_args(%acc0 = %zero) -> (vector<2x4x2x2xf32>) {
          %gac = affine.apply affine_map<(t)[k0] -> ((t mod 2) * 8 + k0)>(%tid)[%k0]
          %gbr = affine.apply affine_map<(t)[k0] -> (t floordiv 8 + k0)>(%tid)[%k0]
          %va = vector.load %A[%ga_r, %gac] : memref<128x?xf16>, vector<8xf16>
          vector.store %va, %sa[%ar_s, %ac_s] : memref<64x16xf16, #gpu.address_space<workgroup>>, vector<8xf16>
          %vb = vector.load %B[%gbr, %gb_c] : memref<?x128xf16>, vector<8xf16>
          vector.store %vb, %sb[%br_s, %bc_s] : memref<16x64xf16, #gpu.address_space<workgroup>>, vector<8xf16>
          gpu.barrier
          %acc2 = scf.for %mi = %c0 to %c2 step %c1 iter_args(%a1 = %acc0) -> (vector<2x4x2x2xf32>) {
            %ar = affine.apply affine_map<(l, mi)[wm] -> (wm + mi * 16 + l mod 8 + ((l floordiv 8) mod 2) * 8)>(%lane, %mi)[%wm]
            %af = nvgpu.ldmatrix %sa[%ar, %ac] numTiles = 4 transpose = false : memref<64x16xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
            %a3 = scf.for %ni = %c0 to %c4 step %c1 iter_args(%a2 = %a1) -> (vector<2x4x2x2xf32>) {
              %bn = affine.apply affine_map<(ni)[wn] -> (wn + ni * 8)>(%ni)[%wn]
              %bf = nvgpu.ldmatrix %sb[%bk, %bn] numTiles = 2 transpose = true : memref<16x64xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
              %cf = vector.extract %a2[%mi, %ni] : vector<2x2xf32> from vector<2x4x2x2xf32>
              %d = nvgpu.mma.sync(%af, %bf, %cf) mmaShape = [16, 8, 16] : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
              %a2n = vector.insert %d, %a2 [%mi, %ni] : vector<2x2xf32> into vector<2x4x2x2xf32>
              scf.yield %a2n : vector<2x4x2x2xf32>
            }
            scf.yield %a3 : vector<2x4x2x2xf32>
          }
          gpu.barrier
          scf.yield %acc2 : vector<2x4x2x2xf32>
        }
        scf.for %mi = %c0 to %c2 step %c1 {
          scf.for %ni = %c0 to %c4 step %c1 {
            %d = vector.extract %acc[%mi, %ni] : vector<2x2xf32> from vector<2x4x2x2xf32>
            %d0 = vector.extract %d[0] : vector<2xf32> from vector<2x2xf32>
            %d1 = vector.extract %d[1] : vector<2xf32> from vector<2x2xf32>
            %r0 = affine.apply affine_map<(l, mi)[m0, wm] -> (m0 + wm + mi * 16 + l floordiv 4)>(%lane, %mi)[%m0, %wm]
            %r1 = affine.apply affine_map<(l, mi)[m0, wm] -> (m0 + wm + mi * 16 + l floordiv 4 + 8)>(%lane, %mi)[%m0, %wm]
            %cn = affine.apply affine_map<(l, ni)[n0, wn] -> (n0 + wn + ni * 8 + (l mod 4) * 2)>(%lane, %ni)[%n0, %wn]
            vector.store %d0, %C[%r0, %cn] : memref<128x128xf32>, vector<2xf32>
            vector.store %d1, %C[%r1, %cn] : memref<128x128xf32>, vector<2xf32>
          }
        }
        return
      }
    }
  }
}
