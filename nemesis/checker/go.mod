module bloodraven.dev/nemesis/checker

go 1.26.8

require github.com/anishathalye/porcupine v1.3.1
