;; The page's int8 products with WebAssembly's relaxed SIMD (see `relaxed_simd.rs`), in a module
;; of its own: a module that uses relaxed SIMD does not compile in a browser without it, so the
;; app itself stays on standard SIMD128 and loads this one only where `WebAssembly.validate`
;; accepts it. It shares the app's memory, and its arguments are addresses in it.
;;
;; `i32x4.relaxed_dot_i8x16_i7x16_add_s w x acc` adds to each `i32` lane of `acc` the sum of four
;; byte products: `w` signed, `x` 7-bit (0..=127). With 7-bit activations a pair of products
;; never leaves 16 bits, so every lowering (x86's `vpdpbusd`, or `pmaddubsw` + `pmaddwd`) gives
;; the same exact sums: those of `Kernel::RelaxedSimd` in `shared/src/ops/int8/mod.rs`, whose
;; layouts these are.
(module
  (import "env" "memory" (memory 1))

  ;; For `pairs` pairs of rows (`width` bytes each, `rows` onwards: quantised activations, a
  ;; multiple of 4 wide) and `panels` panels of 32 columns (`weights` onwards: per panel, per
  ;; group of 4 inputs, 32 columns × 4 signed bytes), writes the `i32` sums row by row to `sums`
  ;; (rows `panels · 32` values apart). Each step takes 2 rows × 16 columns × 4 inputs: 4 weight
  ;; vectors, each row's 4 bytes in all lanes, 8 dot products into 8 accumulators.
  (func (export "products")
    (param $rows i32) (param $width i32) (param $pairs i32)
    (param $weights i32) (param $panels i32) (param $sums i32)
    (local $panel i32) (local $pair i32) (local $half i32) (local $group i32)
    (local $w i32) (local $x i32) (local $out i32) (local $stride i32)
    (local $r0 v128) (local $r1 v128)
    (local $w0 v128) (local $w1 v128) (local $w2 v128) (local $w3 v128)
    (local $a0 v128) (local $a1 v128) (local $a2 v128) (local $a3 v128)
    (local $b0 v128) (local $b1 v128) (local $b2 v128) (local $b3 v128)
    ;; Bytes between two rows of sums.
    (local.set $stride (i32.mul (local.get $panels) (i32.const 128)))
    (local.set $panel (i32.const 0))
    (block $panels_done (loop $panels_loop
      (br_if $panels_done (i32.ge_u (local.get $panel) (local.get $panels)))
      (local.set $pair (i32.const 0))
      (block $pairs_done (loop $pairs_loop
        (br_if $pairs_done (i32.ge_u (local.get $pair) (local.get $pairs)))
        (local.set $half (i32.const 0))
        (block $halves_done (loop $halves_loop
          (br_if $halves_done (i32.ge_u (local.get $half) (i32.const 2)))
          (local.set $a0 (v128.const i32x4 0 0 0 0))
          (local.set $a1 (v128.const i32x4 0 0 0 0))
          (local.set $a2 (v128.const i32x4 0 0 0 0))
          (local.set $a3 (v128.const i32x4 0 0 0 0))
          (local.set $b0 (v128.const i32x4 0 0 0 0))
          (local.set $b1 (v128.const i32x4 0 0 0 0))
          (local.set $b2 (v128.const i32x4 0 0 0 0))
          (local.set $b3 (v128.const i32x4 0 0 0 0))
          ;; The panel's groups start at weights + panel · (width / 4) · 128; this half's 16
          ;; columns 64 bytes into each group.
          (local.set $w (i32.add (local.get $weights)
            (i32.add (i32.mul (local.get $panel) (i32.mul (local.get $width) (i32.const 32)))
                     (i32.mul (local.get $half) (i32.const 64)))))
          ;; The pair's first row.
          (local.set $x (i32.add (local.get $rows)
            (i32.mul (local.get $pair) (i32.mul (local.get $width) (i32.const 2)))))
          (local.set $group (i32.const 0))
          (block $groups_done (loop $groups_loop
            (br_if $groups_done (i32.ge_u (local.get $group) (local.get $width)))
            (local.set $r0 (v128.load32_splat (local.get $x)))
            (local.set $r1 (v128.load32_splat (i32.add (local.get $x) (local.get $width))))
            (local.set $w0 (v128.load offset=0 (local.get $w)))
            (local.set $w1 (v128.load offset=16 (local.get $w)))
            (local.set $w2 (v128.load offset=32 (local.get $w)))
            (local.set $w3 (v128.load offset=48 (local.get $w)))
            (local.set $a0 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w0) (local.get $r0) (local.get $a0)))
            (local.set $a1 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w1) (local.get $r0) (local.get $a1)))
            (local.set $a2 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w2) (local.get $r0) (local.get $a2)))
            (local.set $a3 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w3) (local.get $r0) (local.get $a3)))
            (local.set $b0 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w0) (local.get $r1) (local.get $b0)))
            (local.set $b1 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w1) (local.get $r1) (local.get $b1)))
            (local.set $b2 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w2) (local.get $r1) (local.get $b2)))
            (local.set $b3 (i32x4.relaxed_dot_i8x16_i7x16_add_s (local.get $w3) (local.get $r1) (local.get $b3)))
            (local.set $w (i32.add (local.get $w) (i32.const 128)))
            (local.set $x (i32.add (local.get $x) (i32.const 4)))
            (local.set $group (i32.add (local.get $group) (i32.const 4)))
            (br $groups_loop)))
          ;; Lane j of accumulator k is column half · 16 + 4k + j: stored as they are.
          (local.set $out (i32.add (local.get $sums)
            (i32.add (i32.mul (i32.mul (local.get $pair) (i32.const 2)) (local.get $stride))
              (i32.add (i32.mul (local.get $panel) (i32.const 128))
                       (i32.mul (local.get $half) (i32.const 64))))))
          (v128.store offset=0 (local.get $out) (local.get $a0))
          (v128.store offset=16 (local.get $out) (local.get $a1))
          (v128.store offset=32 (local.get $out) (local.get $a2))
          (v128.store offset=48 (local.get $out) (local.get $a3))
          (local.set $out (i32.add (local.get $out) (local.get $stride)))
          (v128.store offset=0 (local.get $out) (local.get $b0))
          (v128.store offset=16 (local.get $out) (local.get $b1))
          (v128.store offset=32 (local.get $out) (local.get $b2))
          (v128.store offset=48 (local.get $out) (local.get $b3))
          (local.set $half (i32.add (local.get $half) (i32.const 1)))
          (br $halves_loop)))
        (local.set $pair (i32.add (local.get $pair) (i32.const 1)))
        (br $pairs_loop)))
      (local.set $panel (i32.add (local.get $panel) (i32.const 1)))
      (br $panels_loop)))
  )
)
