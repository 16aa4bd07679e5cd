// One warp: C(16x16 f32) = A(16x16 f16) @ Bt(16x16 f16)^T with two nvgpu.mma.sync m16n8k16; fragments loaded with vector.load per the PTX layouts.
#layout = #hal.pipeline.layout<constants = 0, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @mma_gemm_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @mma_gemm ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @mma_gemm() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [32, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c2 = arith.constant 2 : index
        %a_m = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<16x16xf16>
        %bt_m = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<16x16xf16>
        %c_m = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<16x16xf32>
        %l = gpu.lane_id
        %g = affine.apply affine_map<(l) -> (l floordiv 4)>(%l)
        %t2 = affine.apply affine_map<(l) -> ((l mod 4) * 2)>(%l)
        %g8 = affine.apply affine_map<(l) -> (l floordiv 4 + 8)>(%l)
        %t28 = affine.apply affine_map<(l) -> ((l mod 4) * 2 + 8)>(%l)
        %a0 = vector.load %a_m[%g, %t2] : memref<16x16xf16>, vector<2xf16>
        %a1 = vector.load %a_m[%g8, %t2] : memref<16x16xf16>, vector<2xf16>
        %a2 = vector.load %a_m[%g, %t28] : memref<16x16xf16>, vector<2xf16>
        %a3 = vector.load %a_m[%g8, %t28] : memref<16x16xf16>, vector<2xf16>
        %z4 = arith.constant dense<0.0> : vector<4x2xf16>
        %f0 = vector.insert %a0, %z4 [0] : vector<2xf16> into vector<4x2xf16>
        %f1 = vector.insert %a1, %f0 [1] : vector<2xf16> into vector<4x2xf16>
        %f2 = vector.insert %a2, %f1 [2] : vector<2xf16> into vector<4x2xf16>
        %afrag = vector.insert %a3, %f2 [3] : vector<2xf16> into vector<4x2xf16>
        %zc = arith.constant dense<0.0> : vector<2x2xf32>
        scf.for %nt = %c0 to %c2 step %c1 {
          %n = affine.apply affine_map<(l, nt) -> (l floordiv 4 + nt * 8)>(%l, %nt)
          %b0 = vector.load %bt_m[%n, %t2] : memref<16x16xf16>, vector<2xf16>
          %b1 = vector.load %bt_m[%n, %t28] : memref<16x16xf16>, vector<2xf16>
          %bs = vector.shuffle %b0, %b1 [0, 1, 2, 3] : vector<2xf16>, vector<2xf16>
          %bfrag = vector.shape_cast %bs : vector<4xf16> to vector<2x2xf16>
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
