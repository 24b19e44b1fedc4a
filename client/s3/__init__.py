"""S3 as the shared state of a run: the store (the one module that talks to S3), the manifest format, the rolling
uploader and resume.
"""
