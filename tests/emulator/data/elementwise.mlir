// Elementwise: o = fma(f32(a*a in f16), scale, exp2(f32(b))); p = bf16(o) + b in bf16.
#layout = #hal.pipeline.layout<constants = 1, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @elementwise_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @elementwise ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @elementwise() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [64, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c4 = arith.constant 4 : index
        %s32 = hal.interface.constant.load layout(#layout) ordinal(0) : i32
        %scale = arith.bitcast %s32 : i32 to f32
        %a_m = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<256xf16>
        %b_m = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<256xbf16>
        %o_m = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<256xf32>
        %p_m = hal.interface.binding.subspan layout(#layout) binding(3) alignment(64) offset(%c0) : memref<256xbf16>
        %tid = gpu.thread_id x
        %i = arith.muli %tid, %c4 : index
        %a = vector.load %a_m[%i] : memref<256xf16>, vector<4xf16>
        %b = vector.load %b_m[%i] : memref<256xbf16>, vector<4xbf16>
        %aa = arith.mulf %a, %a : vector<4xf16>
        %ta = arith.extf %aa : vector<4xf16> to vector<4xf32>
        %tb = arith.extf %b : vector<4xbf16> to vector<4xf32>
        %sv = vector.broadcast %scale : f32 to vector<4xf32>
        %e = math.exp2 %tb : vector<4xf32>
        %r = math.fma %ta, %sv, %e : vector<4xf32>
        vector.store %r, %o_m[%i] : memref<256xf32>, vector<4xf32>
        %rb = arith.truncf %r : vector<4xf32> to vector<4xbf16>
        %bb = arith.addf %rb, %b : vector<4xbf16>
        vector.store %bb, %p_m[%i] : memref<256xbf16>, vector<4xbf16>
        return
      }
    }
  }
}
