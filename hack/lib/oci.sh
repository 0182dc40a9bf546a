# OCI image packing shared by hack/node-images.sh and hack/images.sh: no
# daemon, no registry; umoci (Debian) writes an OCI layout, and a tar of it is
# the archive `ctr images import` (hack/node.sh import) and `skopeo copy
# oci-archive:` read. Needs $RECIPE (part of the history comment) and $me.
#
# Packs DIR/rootfs (files already in place) into an OCI archive for NAME:TAG.
# umoci unpack/repack as root keeps the owners written in the rootfs.
pack() { # work name tag archive umoci-config-args...
  local work=$1 name=$2 tag=$3 out=$4; shift 4
  local layout="$work/oci" bundle="$work/bundle"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
  cp -a "$work/rootfs/." "$bundle/rootfs/"
  umoci repack --image "$layout:$tag" "$bundle"
  umoci config --image "$layout:$tag" --author=bloodraven \
    --config.env=PATH=/bin --history.comment="hack/$me $name recipe $RECIPE" "$@"
  umoci gc --layout "$layout"
  tar -C "$layout" -cf "$out.tmp" .
  mv "$out.tmp" "$out"
}

