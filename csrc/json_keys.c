/* The number of object members in a JSON text: its colons outside strings.
 *
 * orjson keeps the last of duplicate object keys without a word. The protocol refuses
 * duplicates, so the decoder compares this count with the members the decoded objects
 * hold: fewer members than colons means a key was repeated. The text is valid JSON by
 * then (orjson accepted it), so only strings and their escapes need tracking. */
#include "tay_native.h"

size_t tay_json_member_count(const uint8_t *json, size_t size) {
    size_t count = 0, i = 0;
    while (i < size) {
        uint8_t c = json[i++];
        if (c == ':') {
            count++;
        } else if (c == '"') {
            while (i < size) {
                c = json[i++];
                if (c == '\\') i++;           /* the escaped byte cannot end the string */
                else if (c == '"') break;
            }
        }
    }
    return count;
}
