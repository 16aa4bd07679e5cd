// One warp: gpu.shuffle xor/down/up/idx, transfer_read with padding, reductions, subgroup_reduce, select on the valid flag, signed integer division.
#layout = #hal.pipeline.layout<constants = 0, bindings = [#hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
#target = #hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = #iree_gpu.target<
  arch = "sm_80", features = "+ptx76",
  wgp = <compute = fp32|fp16|int32, storage = b32|b16, subgroup = shuffle|arithmetic, dot = none,
         mma = [<NV_MMA_SYNC_F32_16x8x16_F16>], subgroup_size_choices = [32],
         max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024,
         max_workgroup_memory_bytes = 166912, max_workgroup_counts = [2147483647, 65535, 65535]>>}>
hal.executable @lane_ops_exe {
  hal.executable.variant public @v target(#target) {
    hal.executable.export public @lane_ops ordinal(0) layout(#layout) count(%d: !hal.device) -> (index, index, index) {
      %c1 = arith.constant 1 : index
      hal.return %c1, %c1, %c1 : index, index, index
    }
    builtin.module {
      func.func @lane_ops() attributes {translation_info = #iree_codegen.translation_info<
          pipeline = #iree_codegen.no_pipeline workgroup_size = [32, 1, 1] subgroup_size = 32>} {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c2 = arith.constant 2 : index
        %c3 = arith.constant 3 : index
        %c4 = arith.constant 4 : index
        %c5 = arith.constant 5 : index
        %c6 = arith.constant 6 : index
        %i1 = arith.constant 1 : i32
        %i3 = arith.constant 3 : i32
        %i4 = arith.constant 4 : i32
        %i5 = arith.constant 5 : i32
        %i16 = arith.constant 16 : i32
        %i28 = arith.constant 28 : i32
        %i32 = arith.constant 32 : i32
        %pad = arith.constant -1.0 : f32
        %x = hal.interface.binding.subspan layout(#layout) binding(0) alignment(64) offset(%c0) : memref<32xf32>
        %o = hal.interface.binding.subspan layout(#layout) binding(1) alignment(64) offset(%c0) : memref<32x8xf32>
        %oi = hal.interface.binding.subspan layout(#layout) binding(2) alignment(64) offset(%c0) : memref<32x4xi32>
        %tid = gpu.thread_id x
        %f = memref.load %x[%tid] : memref<32xf32>
        %s0, %v0 = gpu.shuffle xor %f, %i1, %i32 : f32
        memref.store %s0, %o[%tid, %c0] : memref<32x8xf32>
        %s1, %v1 = gpu.shuffle down %f, %i4, %i16 : f32
        memref.store %s1, %o[%tid, %c1] : memref<32x8xf32>
        %s2, %v2 = gpu.shuffle up %f, %i4, %i32 : f32
        memref.store %s2, %o[%tid, %c2] : memref<32x8xf32>
        %s3, %v3 = gpu.shuffle idx %f, %i5, %i32 : f32
        memref.store %s3, %o[%tid, %c3] : memref<32x8xf32>
        %r = vector.transfer_read %x[%tid], %pad {in_bounds = [false]} : memref<32xf32>, vector<4xf32>
        %red = vector.reduction <add>, %r : vector<4xf32> into f32
        memref.store %red, %o[%tid, %c4] : memref<32x8xf32>
        %sr = gpu.subgroup_reduce add %f : (f32) -> f32
        memref.store %sr, %o[%tid, %c5] : memref<32x8xf32>
        %mx = vector.reduction <maximumf>, %r : vector<4xf32> into f32
        memref.store %mx, %o[%tid, %c6] : memref<32x8xf32>
        %sel = arith.select %v1, %mx, %f : f32
        %c7 = arith.constant 7 : index
        memref.store %sel, %o[%tid, %c7] : memref<32x8xf32>
        %ti = arith.index_cast %tid : index to i32
        %a = arith.subi %ti, %i16 : i32
        %q = arith.divsi %a, %i3 : i32
        memref.store %q, %oi[%tid, %c0] : memref<32x4xi32>
        %rm = arith.remsi %a, %i3 : i32
        memref.store %rm, %oi[%tid, %c1] : memref<32x4xi32>
        %sh = arith.shrui %a, %i28 : i32
        memref.store %sh, %oi[%tid, %c2] : memref<32x4xi32>
        %fd = arith.floordivsi %a, %i3 : i32
        memref.store %fd, %oi[%tid, %c3] : memref<32x4xi32>
        return
      }
    }
  }
}
