// One 64-lane wave: C(32x32) = A(32x16) @ Bt(32x16)^T with two amdgpu.mfma 32x32x8 f16 steps (CDNA3 layouts).
#layout = #hal.pipeline.layout<constants = 0, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"rocm", "rocm-hsaco-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "gfx942", features = "",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<MFMA_F32_16x16x16_F16>, <MFMA_F32_32x32x8_F16>], subgroup_size_choices = [64],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 65536, max_workgroup_counts = [2147483647, 2147483647, 2147483647]>>}>
hal.executable @mfma32_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @mfma32 ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @mfma32() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [64, 1, 1] subgroup_size = 64>} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c8 = arith.constant 8 : index
        %c16 = arith.constant 16 : index
        %a_m = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<32x16xf16>
        %bt_m = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<32x16xf16>
        %c_m = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<32x32xf32>
        %l = gpu.thread_id x
        %row = affine.apply affine_map<(l) -> (l mod 32)>(%l)
        %zero = arith.constant dense<0.0> : vector<16xf32>
        %acc = scf.for %ks = %c0 to %c16 step %c8 iter_args(%c = %zero) -> (vector<16xf32>) {
          %k = affine.apply affine_map<(l, ks) -> ((l floordiv 32) * 4 + ks)>(%l, %ks)
          %af = vector.load %a_m[%row, %k] : memref<32x16xf16>, vector<4xf16>
          %bf = vector.load %bt_m[%row, %k] : memref<32x16xf16>, vector<4xf16>
          %d = amdgpu.mfma 32x32x8 %af * %bf + %c : vector<4xf16>, vector<4xf16>, vector<16xf32>
          scf.yield %d : vector<16xf32>
        }
        scf.for %j = %c0 to %c16 step %c1 {
          %m = affine.apply affine_map<(l, j) -> ((j floordiv 4) * 8 + (l floordiv 32) * 4 + j mod 4)>(%l, %j)
          %v = vector.extract %acc[%j] : f32 from vector<16xf32>
          memref.store %v, %c_m[%m, %row] : memref<32x32xf32>
        }
        return
      }
    }
  }
}
