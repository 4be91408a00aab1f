"""What makes and reads a Bento: the container image and its arguments (`container_image`), containerizing with
Docker, buildah or podman (`containerize`), the model store and the models a Bento pins (`store`), and the ONNX
exports a Bento carries (`exports`)."""
