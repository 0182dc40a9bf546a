// The pause program of the node image (hack/node-images.sh); no dependencies.
module bloodraven.local/tools/pause

go 1.25.0
